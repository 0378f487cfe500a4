#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The response phase through the shipped haproxy.cfg (issue 19): rules
# charged by the response (charge: response, count: response) get
# rl-response (grp-response) only when the agent set rl.response, with the
# status and the cost the application reported in X-Tokens-Used (the demo
# backend's /v1/completions answers with X-Demo-Tokens, else 300).
#   - a token budget of 1,000 (gcra, 1000/min, burst 1000) and requests
#     that spend 300 each: requests pass while a unit is left (900 spent:
#     the 4th passes and takes the key into debt, 1,200), the 5th is 429
#     with the RFC 9457 problem body (quota-exceeded, the violated policy)
#     and a Retry-After right to the second (the debt paid back at
#     1000/min: 12.06 s, so 13, or 12 when the requests took over 60 ms);
#   - a status-counting rule (count: response, status: 5xx, 2 per minute
#     per IP) counts only 5xx: many 404s cost nothing, two 503s spend it,
#     the next request from that IP is 429, another IP passes;
#   - a response without the cost header charges nothing and is counted
#     in spoa_rl_response_costs_rejected_total; the units charged are in
#     spoa_rl_response_units_charged_total;
#   - reserve, then settle (reserve: "{max_tokens}", X-Max-Tokens): the
#     same budget of 1,000, 300 reserved per request: the 4th is 429 with
#     the problem body and Retry-After 12 (200 tokens at 1000/min); a
#     request that spends less than it reserved is refunded, so 6 that
#     reserve 300 and spend 50 all pass.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

MET_PORT=$(port 5)
{
	policy_head 25ms
	cat <<EOF
metrics:
  listen: "127.0.0.1:$MET_PORT"
log:
  level: info
rules:
  - name: llm-tokens
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    rate: 1000/min
    burst: 1000
    charge: response
    cost: "{cost}"
    missing: skip
  - name: errors-5xx
    message: rl-request
    key: "ip:{ip}"
    algorithm: sliding-window
    limit: 2
    window: 1m
    count: response
    status: 5xx
    missing: skip
EOF
} >"$POLICY"
policy_valid "the response-phase policy is valid"
start_stack
rc=$?
ok $rc "stack up, agent UP"
[ $rc -eq 0 ] || finish
wait_port "$MET_PORT" 5

# ---- a token budget --------------------------------------------------------
tokens() {	# tokens ADDR TENANT [N]: one completion spending N (300)
	req --interface "$1" -H "X-Tenant: $2" -H "X-Demo-Tokens: ${3:-300}" \
		"$URL/v1/completions"
}
codes=""
t0=$EPOCHREALTIME	# the debt drains from the first charge on
for i in 1 2 3 4; do codes="$codes $(tokens 127.0.0.11 acme)"; done
expect_eq "$codes" " 200 200 200 200" \
	"4 requests of 300 tokens pass while the budget has a unit left"
expect_eq "$(hdr X-Tokens-Used)" 300 "the demo backend reports X-Tokens-Used"
c=$(tokens 127.0.0.11 acme)
expect_eq "$c" 429 "the 5th request (1,200 of 1,000 spent: in debt) is 429"
ra=$(hdr Retry-After)
# the 200-token debt plus one unit at 1000/min: 201 x 60 ms = 12.06 s
# from the first charge, less the time since then, rounded up
lo=$(since_ceil "$t0" 12.06)
[ -n "$ra" ] && [ "$ra" -ge "$lo" ] 2>/dev/null && [ "$ra" -le 13 ]
ok $? "Retry-After is the 200-token debt plus one unit at 1000/min, 12.06 s less the time since the first charge: $lo..13 (got '$ra')"
case $(hdr Content-Type) in application/problem+json*) r=0;; *) r=1;; esac
ok $r "the 429 is application/problem+json"
grep -q '"type":"https://iana.org/assignments/http-problem-types#quota-exceeded"' "$TMP/b" &&
	grep -q '"status":429' "$TMP/b" && grep -q '"title":"' "$TMP/b" &&
	grep -q '"violated-policies":\["llm-tokens"\]' "$TMP/b" &&
	grep -q "\"retry_after\":$ra}" "$TMP/b"
ok $? "the body is the quota-exceeded problem naming llm-tokens ($(cat "$TMP/b"))"
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$TMP/b"
ok $? "the problem body is valid JSON"
case $(hdr RateLimit-Policy) in '"llm-tokens";q=1000;w=60, "errors-5xx";q=2;w=60') r=0;; *) r=1;; esac
ok $r "RateLimit-Policy is kept on the 429 ($(hdr RateLimit-Policy))"
expect_eq "$(tokens 127.0.0.11 globex)" 200 "another tenant has its own budget"

# ---- a missing cost --------------------------------------------------------
rej0=$(metric "$MET_PORT" spoa_rl_response_costs_rejected_total)
for i in 1 2 3; do
	req --interface 127.0.0.11 -H 'X-Tenant: initech' "$URL/" >/dev/null
done
expect_eq "$(tokens 127.0.0.11 initech 999)" 200 \
	"responses without X-Tokens-Used charged nothing"
expect_eq "$(metric "$MET_PORT" spoa_rl_response_costs_rejected_total)" \
	$((rej0 + 3)) "3 missing costs counted in spoa_rl_response_costs_rejected_total"
expect_eq "$(metric "$MET_PORT" 'spoa_rl_response_units_charged_total{rule="llm-tokens"}')" \
	$((5 * 300 + 999)) "units charged: 4 + 1 (globex) requests of 300, and 999"
grep -q 'msg=response_cost_rejected rule=llm-tokens arg=cost' "$TMP/agent.log"
ok $? "the rejected cost is logged"
[ "$(grep -c 'msg=response_cost_rejected' "$TMP/agent.log")" -le 2 ]
ok $? "logged at most once per 10 s per rule and worker (2 workers)"

# ---- counting by status ----------------------------------------------------
codes=""
for i in 1 2 3 4 5; do
	codes="$codes $(req --interface 127.0.0.12 "$URL/status/4xx")"
done
expect_eq "$codes" " 404 404 404 404 404" "404s are not counted by a 5xx rule"
codes=""
for i in 1 2; do
	codes="$codes $(req --interface 127.0.0.12 "$URL/status/5xx")"
done
expect_eq "$codes" " 503 503" "two 503s from the application pass (and are counted)"
expect_eq "$(req --interface 127.0.0.12 "$URL/")" 429 \
	"the next request from that IP is 429 (2 5xx per minute)"
grep -q '"violated-policies":\["errors-5xx"\]' "$TMP/b"
ok $? "the problem names errors-5xx"
expect_eq "$(req --interface 127.0.0.13 "$URL/")" 200 "another IP is not affected"

# ---- reserve, then settle -------------------------------------------------
# The same budget of 1,000 tokens, now held at admission: each request
# reserves its X-Max-Tokens (300), so the 4th is refused before it runs,
# and the response settles the difference (a refund for a request that
# spent less). The agent is restarted on a policy of that one rule.
{
	policy_head 50ms
	cat <<EOF
metrics:
  listen: "127.0.0.1:$MET_PORT"
rules:
  - name: llm-reserve
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    rate: 1000/min
    burst: 1000
    reserve: "{max_tokens}"
    cost: "{cost}"
    missing: skip
EOF
} >"$POLICY"
policy_valid "the reserve policy is valid"
restart_agent "$POLICY"
ok $? "agent restarted on the reserve policy"
wait_port "$MET_PORT" 5
spend() {	# spend TENANT RESERVED SPENT: one completion
	req --interface 127.0.0.11 -H "X-Tenant: $1" -H "X-Max-Tokens: $2" \
		-H "X-Demo-Tokens: $3" "$URL/v1/completions"
}
codes=""
t0=$(now_ms)
for i in 1 2 3; do codes="$codes $(spend hooli 300 300)"; done
expect_eq "$codes" " 200 200 200" "3 requests reserving 300 of 1,000 pass"
expect_eq "$(spend hooli 300 300)" 429 \
	"the 4th is 429: its 300 do not fit in the 100 left"
ra=$(hdr Retry-After)
# 200 more tokens at 1000/min (60 ms each): 12 s after the first
# reservation, so 12 when the four requests took under a second, and
# ceil(12 - their time) at the least on a slow machine
low=$(( (12000 - ($(now_ms) - t0) + 999) / 1000 ))
[ "$ra" -le 12 ] && [ "$ra" -ge "$low" ]
ok $? "Retry-After is right to the second: 12 s after the first reservation (got '$ra', at least $low)"
case $(hdr Content-Type) in application/problem+json*) r=0;; *) r=1;; esac
ok $r "the 429 is application/problem+json"
grep -q '"violated-policies":\["llm-reserve"\]' "$TMP/b" &&
	grep -q "\"retry_after\":$ra}" "$TMP/b"
ok $? "the problem names llm-reserve ($(cat "$TMP/b"))"
codes=""
for i in 1 2 3 4 5 6; do codes="$codes $(spend umbrella 300 50)"; done
expect_eq "$codes" " 200 200 200 200 200 200" \
	"requests reserving 300 that spend 50 are refunded 250 each: 6 pass"
expect_eq "$(metric "$MET_PORT" 'spoa_rl_reserve_units_refunded_total{rule="llm-reserve"}')" \
	$((6 * 250)) "the refunds are counted"
expect_eq "$(metric "$MET_PORT" 'spoa_rl_reserve_units_reserved_total{rule="llm-reserve"}')" \
	$((9 * 300)) "the reservations are counted (3 + 6 that passed)"
expect_eq "$(metric "$MET_PORT" 'spoa_rl_reserve_settles_unmatched_total{rule="llm-reserve"}')" \
	0 "every settle found its reservation"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"
finish
