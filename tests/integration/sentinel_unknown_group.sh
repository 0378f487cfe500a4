#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A sentinel listed in redis+sentinel:// that monitors another group than
# the URL's (its sentinel.conf names "othergroup", or the URL has a typo).
# It answers SENTINEL get-master-addr-by-name mymaster with nil, and
# confirms SUBSCRIBE +switch-master like any sentinel: the agent kept it
# as its subscription and heard none of mymaster's failovers (only the
# demoted master's errors, seconds later, sent it looking again), and the
# log only warned, at each discovery, that it had "unknown master". Now
# the nil marks it as no sentinel of ours, as "ERR unknown command" marks
# a plain Redis: one error line names it and the group, and the agent
# goes on to the next sentinel, for discovery and the subscription alike.
#
# The URL lists the other group's sentinel first, then a sentinel of
# mymaster: the agent must subscribe to the second, log the first once,
# and hear a failover forced through the second as a +switch-master.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../e2e/lib-topo.bash"	# start_sentinel, sentinel_agent_up, ...
M=$(port 1); R=$(port 2); O=$(port 3); SO=$(port 4); SG=$(port 5); AP=$(port 6)

master_replica_up "$M" "$R"
start_redis "$O"	# the other group's master
start_sentinel "$SO" "$O" othergroup
start_sentinel "$SG" "$M"
expect_eq "$(rc "$SO" sentinel get-master-addr-by-name mymaster)" "" \
	":$SO answers nil for mymaster"
until_ok 200 sentinel_sees_replica "$SG" "$R"; ok $? "the sentinel :$SG sees the replica"

sentinel_agent_up "127.0.0.1:$SO,127.0.0.1:$SG"
log_has() { grep -q "$1" "$TMP/agent.log"; }
until_ok 50 subscribed_to "$SG"; ok $? "the agent subscribes to the sentinel :$SG"
! subscribed_to "$SO"; ok $? "no subscription is claimed on the other group's sentinel :$SO"
until_ok 50 counted_on "$M" before; ok $? "requests are counted on the master :$M"

line="level=error msg=sentinel_unknown_group host=127.0.0.1 port=$SO master=mymaster "
expect_eq "$(grep -c "$line" "$TMP/agent.log")" 1 "one error line names :$SO and the group it does not know"
! log_has "msg=sentinel_no_master host=127.0.0.1 port=$SO"
ok $? "... and no sentinel_no_master warning for it"

failover_followed "$SG" "$R"
expect_eq "$(grep -c "$line" "$TMP/agent.log")" 1 "still one error line for :$SO"
kill -0 "$AGENT_PID"; ok $? "the agent is still running"
finish
