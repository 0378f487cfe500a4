#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The +switch-master subscription is up when the sentinel confirms the
# SUBSCRIBE, not when TCP connects. The first version marked it up on
# connect: a sentinel that accepts and never answers (stopped, hung) kept
# the agent "subscribed" to it for good, and a failover reached it only
# through the errors of a demoted master; a sentinel whose ACL refuses
# SUBSCRIBE was logged as subscribed too (hiredis drops the link on the
# error, so that one was left soon). Now the confirmation has the connect
# timeout, a refusal is logged as such, and the next sentinel is tried.
#
# The URL's sentinels: a stopped one, one refusing SUBSCRIBE (NOPERM),
# then a good one, which must end up the agent's subscription; a forced
# failover is then heard as +switch-master.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../e2e/lib-topo.bash"	# master_replica_up, start_sentinel, ...
M=$(port 1); R=$(port 2); SH=$(port 3); SA=$(port 4); SG=$(port 5); AP=$(port 6)

master_replica_up "$M" "$R"
start_redis "$SH"	# the hung "sentinel": accepts, never answers
kill -STOP "$(eval echo \$REDIS_PID_$SH)"
start_sentinel "$SA" "$M" mymaster 'user default on nopass ~* &* +@all -subscribe'
start_sentinel "$SG" "$M"
r=$(redis-cli -h 127.0.0.1 -p "$SA" subscribe +switch-master 2>&1 | head -1)
case $r in NOPERM*) ok 0 "the ACL sentinel refuses SUBSCRIBE ($r)" ;; *) ok 1 "the ACL sentinel refuses SUBSCRIBE (got '$r')" ;; esac
until_ok 200 sentinel_sees_replica "$SG" "$R"; ok $? "the good sentinel sees the replica"

cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis+sentinel://127.0.0.1:$SH,127.0.0.1:$SA,127.0.0.1:$SG/mymaster", timeout: 100ms }
processing_timeout: 1s
rules:
  - { name: t, message: rl-request, key: "t:{tenant}", rate: 10/s, fail: open }
YAML
agent_up "$TMP/policy.yaml"
subscribed() { grep -q "msg=sentinel_subscribed host=127.0.0.1 port=$SG" "$TMP/agent.log"; }
until_ok 100 subscribed; ok $? "the agent subscribes to the good sentinel"
listed() { rc "$SG" client list | grep -q 'cmd=subscribe'; }
until_ok 20 listed; ok $? "... which lists its SUBSCRIBE"
for p in "$SH" "$SA"; do
	! grep -q "msg=sentinel_subscribed host=127.0.0.1 port=$p" "$TMP/agent.log"
	ok $? "no subscription is claimed on :$p"
done
grep -q "msg=sentinel_subscribe_failed host=127.0.0.1 port=$SA error=\"NOPERM" "$TMP/agent.log"
ok $? "the refusal is logged with its error"
grep -q "msg=sentinel_timeout host=127.0.0.1 port=$SH subscribe=1" "$TMP/agent.log"
ok $? "the hung sentinel's confirmation timed out"

expect_eq "$(rc "$SG" sentinel failover mymaster)" OK "a forced failover"
heard() { grep -q "msg=sentinel_switch_master master=mymaster host=127.0.0.1 port=$R" "$TMP/agent.log"; }
until_ok 200 heard; ok $? "the agent hears +switch-master to the replica"
kill -0 "$AGENT_PID"; ok $? "the agent is still running"
kill -CONT "$(eval echo \$REDIS_PID_$SH)"	# so that cleanup's TERM ends it
finish
