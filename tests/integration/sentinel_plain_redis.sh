#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A plain Redis listed among the sentinels of redis+sentinel:// (a typo, a
# port mixed up). It accepts SUBSCRIBE +switch-master and confirms it like
# a sentinel, so the agent took it for its subscription and kept it (the
# keepalives are confirmed too): no failover was ever heard, and nothing
# in the log said why; discovery only warned that it had "no master".
# Now its answer to SENTINEL get-master-addr-by-name ("ERR unknown
# command") marks it as no sentinel: one error line names its address,
# and the agent goes on to the next sentinel, for discovery and for the
# subscription alike.
#
# The URL lists the plain Redis first, then a real sentinel: the agent
# must subscribe to the sentinel, log the plain one once, and hear a
# failover forced through the sentinel.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../e2e/lib-topo.bash"	# start_sentinel, sentinel_agent_up, ...
M=$(port 1); R=$(port 2); P=$(port 3); SG=$(port 4); AP=$(port 5)

master_replica_up "$M" "$R"
start_redis "$P"	# the plain Redis in the sentinels' list
start_sentinel "$SG" "$M"
until_ok 200 sentinel_sees_replica "$SG" "$R"; ok $? "the sentinel sees the replica"

sentinel_agent_up "127.0.0.1:$P,127.0.0.1:$SG"
log_has() { grep -q "$1" "$TMP/agent.log"; }
until_ok 50 subscribed_to "$SG"; ok $? "the agent subscribes to the sentinel :$SG"
! subscribed_to "$P"; ok $? "no subscription is claimed on the plain Redis :$P"
listed() { rc "$SG" client list | grep -q 'cmd=subscribe'; }
until_ok 20 listed; ok $? "... and :$SG lists the agent's SUBSCRIBE"
! rc "$P" client list | grep -q 'cmd=subscribe'; ok $? "... which :$P does not"
until_ok 50 counted_on "$M" before; ok $? "requests are counted on the master :$M"

line="level=error msg=sentinel_not_a_sentinel host=127.0.0.1 port=$P "
expect_eq "$(grep -c "$line" "$TMP/agent.log")" 1 "one error line names :$P as no sentinel"
grep "$line" "$TMP/agent.log" | grep -q "error=\"ERR unknown command 'SENTINEL'"
ok $? "... with Redis' error, quoted (its text goes through log_text)"

failover_followed "$SG" "$R"
expect_eq "$(grep -c "$line" "$TMP/agent.log")" 1 "still one error line for :$P"
kill -0 "$AGENT_PID"; ok $? "the agent is still running"
finish
