#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Reserve, then settle: the settles the agent cannot see through (issue
# 19, "Bad input"), against a real redis-server:
#   - a settle sent to Redis whose answer comes after redis.timeout
#     (Redis stopped with SIGSTOP) is counted as unconfirmed, not as
#     unmatched: Redis may still apply it, and here it does (the refund
#     shows once Redis runs again); it is logged;
#   - a settle for a rule a reload removed, when the new policy binds no
#     rule to its message, is counted in
#     spoa_rl_reserve_settles_orphaned_total and logged at most once per
#     10 s; the agent keeps serving; the record survives a second reload;
#     a message no reserving rule ever settled is not counted.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); MP=$(port 4)
rule() {	# rule NAME: a reserving gcra rule on rl-NAME, 1000 a day
	reserve_rule "$1" "rl-$1" "rl-$1-response" open
}
top() {
	policy_top "$AP" "redis://127.0.0.1:$RP/0" 100ms 1
	echo "processing_timeout: 1s"
	echo "metrics: { listen: 127.0.0.1:$MP }"
	echo "rules:"
}
{ top; rule u; rule gone; } >"$TMP/policy.yaml"
start_redis "$RP" && agent_up "$TMP/policy.yaml" ||
	{ ok 1 "the agent starts"; finish; }

c() { "$CLIENT" -a "127.0.0.1:$AP" "$@" | grep '^ack'; }
left() { c "rl-$1" tenant=s:$2 id=s:peek max_tokens=s:0 | field remaining; }
m() { metric "$MP" "$1"; }

# ---- a settle answered past redis.timeout ------------------------------
expect_eq "$(c rl-u tenant=s:a id=s:u1 max_tokens=s:300 | field remaining)" 700 \
	"a reservation of 300 is held"
pid=$(eval echo "\$REDIS_PID_$RP")
kill -STOP "$pid"
out=$(c rl-u-response tenant=s:a id=s:u1 status=i:200 cost=s:0)
kill -CONT "$pid"
echo "$out" | grep -q '^ack'
ok $? "Redis stopped: the settle is answered anyway (fail: open)"
expect_eq "$(m 'spoa_rl_reserve_settles_unconfirmed_total{rule="u"}')" 1 \
	"the settle past redis.timeout is counted as unconfirmed"
expect_eq "$(m 'spoa_rl_reserve_settles_unmatched_total{rule="u"}')" 0 \
	"and not as unmatched"
until_ok 50 eval '[ "$(left u a)" = 1000 ]'
expect_eq "$(left u a)" 1000 \
	"Redis, running again, applied the late settle: all 300 refunded"
grep -q 'msg=settle_unconfirmed rule=u ' "$TMP/agent.log"
ok $? "the unconfirmed settle is logged"

# ---- a settle for a rule removed by a reload ---------------------------
expect_eq "$(c rl-gone tenant=s:b id=s:g1 max_tokens=s:300 | field status)" 0 \
	"rule gone reserves 300 for g1"
c rl-gone tenant=s:b id=s:g2 max_tokens=s:300 >/dev/null
{ top; rule u; } >"$TMP/policy.yaml"
kill -HUP "$AGENT_PID"
until_ok 50 grep -q 'msg=reloaded' "$TMP/agent.log"
ok $? "reloaded without rule gone"
c rl-gone-response tenant=s:b id=s:g1 status=i:200 cost=s:0 | grep -q '^ack'
ok $? "its settle is answered"
expect_eq "$(m spoa_rl_reserve_settles_orphaned_total)" 1 \
	"and counted in spoa_rl_reserve_settles_orphaned_total"
grep -q 'msg=settle_orphaned message=rl-gone-response removed_rules=gone ' "$TMP/agent.log"
ok $? "logged, naming the message and the removed rule"
c rl-gone-response tenant=s:b id=s:g2 status=i:200 cost=s:0 >/dev/null
expect_eq "$(m spoa_rl_reserve_settles_orphaned_total)" 2 "a second one counts too"
expect_eq "$(grep -c 'msg=settle_orphaned' "$TMP/agent.log")" 1 \
	"logged at most once per 10 s"
kill -HUP "$AGENT_PID"
until_ok 50 eval '[ "$(grep -c msg=reloaded "$TMP/agent.log")" -ge 2 ]'
c rl-gone-response tenant=s:b id=s:g3 status=i:200 cost=s:0 >/dev/null
expect_eq "$(m spoa_rl_reserve_settles_orphaned_total)" 3 \
	"a second reload keeps the record (the lease runs)"
c rl-never-response tenant=s:b id=s:n1 status=i:200 cost=s:0 >/dev/null
expect_eq "$(m spoa_rl_reserve_settles_orphaned_total)" 3 \
	"a message no reserving rule settled is not counted"
expect_eq "$(m 'spoa_rl_reserve_settles_unmatched_total{rule="gone"}')" 0 \
	"orphans are not unmatched settles"
kill -0 "$AGENT_PID"
ok $? "the agent is alive"
expect_eq "$(c rl-u tenant=s:a id=s:u2 max_tokens=s:300 | field remaining)" 700 \
	"and the remaining rule still reserves"
finish
