#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Counters that were off. Decision counters across a reload that
# reorders the rules: requests
# decided under the old policy after the swap are counted under their own
# rule's name. Before, they were counted by index in the new policy's map
# (published before the workers even switched), so under another rule.
# And spop_frames_total{type="disconnect"} counts the DISCONNECTs
# received: it counted the agent's own reply too (2 per HAProxy close).
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); MP=$(port 3)
start_redis "$RP"
policy() {	# policy FIRST SECOND: two rules in that order
	cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
metrics: { listen: "127.0.0.1:$MP" }
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 1500ms }
processing_timeout: 3s
rules:
$(for r in "$@"; do
	echo "  - { name: $r, message: rl-$r, key: \"$r:{tenant}\", rate: 1000/s, burst: 1000, fail: open }"
done)
YAML
}
policy tenant slow
agent_up "$TMP/policy.yaml"
count() {
	curl -s --max-time 3 "http://127.0.0.1:$MP/metrics" |
		awk -v r="$1" 'index($1, "spoa_rl_decisions_total{rule=\"" r "\"") == 1 { s += $2 }
		               END { printf "%d", s }'
}
"$TOOLS/spop-client" -a "127.0.0.1:$AP" rl-tenant tenant=s:warm >/dev/null
expect_eq "$(count tenant)/$(count slow)" "1/0" "one decision of rule tenant"
eval "rpid=\$REDIS_PID_$RP"
kill -STOP "$rpid"
# 10 NOTIFYs of rule tenant wait on the stopped Redis...
"$TOOLS/spop-client" -a "127.0.0.1:$AP" -t 5000 -n 10 -P 10 rl-tenant tenant=s:t \
	>"$TMP/held.out" 2>&1 &
HELD=$!
sleep 0.3
# ...while a reload puts rule slow first
policy slow tenant
kill -HUP "$AGENT_PID"
until_ok 50 grep -q 'msg=reloaded' "$TMP/agent.log"; ok $? "reloaded, rules reordered"
kill -CONT "$rpid"
wait "$HELD"
expect_eq "$(grep -c '^ack' "$TMP/held.out")" 10 "the 10 held NOTIFYs are answered"
expect_eq "$(count tenant)/$(count slow)" "11/0" \
	"all 11 counted under rule tenant, none under slow"

disc() {
	curl -s --max-time 3 "http://127.0.0.1:$MP/metrics" |
		awk '$1 == "spoa_rl_spop_frames_total{type=\"disconnect\"}" { print $2 + 0 }'
}
d0=$(disc)
"$TOOLS/spop-client" -a "127.0.0.1:$AP" -D "0:bye" >/dev/null
expect_eq "$(( $(disc) - d0 ))" 1 "one HAPROXY-DISCONNECT received: disconnect frames +1"
finish
