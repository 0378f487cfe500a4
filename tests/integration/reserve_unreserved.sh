#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A reload that keeps a reserving rule's name but drops its reserve: (and
# so its result_message) orphans the settles still coming for the
# reservations made before it, as a reload that removes the rule does
# (OPERATING.md, "Reservations"): nothing takes rl-res any more, the
# reservations stay charged until their lease. Those settles are counted
# in spoa_rl_reserve_settles_orphaned_total and logged, not dropped
# without a trace because a rule of that name is still there.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); MP=$(port 3)
top() {
	policy_top "$AP" "redis://127.0.0.1:$RP/0" 200ms 1
	echo "processing_timeout: 1s"
	echo "metrics: { listen: 127.0.0.1:$MP }"
	echo "rules:"
}
{
	top
	reserve_rule tok rl-req rl-res
} >"$TMP/policy.yaml"
start_redis "$RP" && agent_up "$TMP/policy.yaml" ||
	{ ok 1 "the agent starts"; finish; }
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@" | grep '^ack'; }
m() { metric "$MP" "$1"; }

expect_eq "$(c rl-req tenant=s:a id=s:r1 max_tokens=s:300 | field remaining)" 700 \
	"tok reserves 300 for r1"
{
	top
	cat <<YAML
  - name: tok
    message: rl-req
    key: "t:{tenant}"
    algorithm: gcra
    rate: 1000/d
    burst: 1000
YAML
} >"$TMP/policy.yaml"
kill -HUP "$AGENT_PID"
until_ok 50 grep -q 'msg=reloaded' "$TMP/agent.log"
ok $? "reloaded: tok no longer reserves"
c rl-res tenant=s:a id=s:r1 status=i:200 cost=s:0 | grep -q '^ack'
ok $? "r1's settle is answered"
expect_eq "$(m spoa_rl_reserve_settles_orphaned_total)" 1 \
	"and counted in spoa_rl_reserve_settles_orphaned_total"
grep -q 'msg=settle_orphaned message=rl-res removed_rules=tok ' "$TMP/agent.log"
ok $? "logged, naming the message and the rule that stopped reserving"
finish
