#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A GCRA tenant's limit raised (or lowered) while it is spent, through the
# shipped haproxy.cfg. The rule is gcra 3/min burst 3 from plan free;
# plan pro and the runtime overrides give 600/min burst 100. GCRA keeps a
# time (the TAT), which is the units spent times the emission interval:
# read under another interval it must be rescaled, or 3 units spent at 20 s
# each read as 600 units at 0.1 s, and the raise refuses the tenant for
# 50 s where the old limit would have let it in after 20.
#   1. `override set tenant tenant=acme --rate 600/min --burst 100` on a
#      tenant that spent its 3: the next request passes, with r near 100
#      (docs/OPERATING.md: "raising a limit lets the tenant use the
#      difference at once");
#   2. the same for a plan raised in Redis (HSET plans upco pro);
#   3. `override del` on a tenant that spent 20 under the override puts
#      it back under 3/min "with what it spent": 429.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

{
	policy_head 50ms
	cat <<EOF
plans:
  free: { rate: 3/min, burst: 3 }
  pro:  { rate: 600/min, burst: 100 }
plan_lookup: { arg: plan, redis_hash: plans, default: free, cache: 1s }
rules:
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    plan: rate
    missing: deny
EOF
} >"$POLICY"
policy_valid "the policy is valid"
start_stack
ok $? "stack up, agent UP"
ov() { "$AGENT" override "$@" -f "$POLICY" -r "redis://127.0.0.1:$REDIS_PORT/0"; }
RC="redis-cli -p $REDIS_PORT"
q_of_last() { sf_param "$(hdr RateLimit-Policy)" q; }
r_of_last() { sf_param "$(hdr RateLimit)" r; }
# spend TENANT N: N requests of TENANT in one curl; their codes.
spend() {
	curl -s --max-time 10 -H "X-Tenant: $1" -o /dev/null \
		-w ' %{http_code}' "$URL/?i=[1-$2]" 2>/dev/null
}
# raised TENANT: requests 100 ms apart until one reports q=100 (at most
# 30); prints its code and r.
raised() {
	n=0
	while [ $n -lt 30 ]; do
		c=$(req -H "X-Tenant: $1" "$URL/")
		[ "$(q_of_last)" = 100 ] && { echo "$c $(r_of_last)"; return; }
		n=$((n + 1)); sleep 0.1
	done
	echo "never-raised"
}

# ---- 1. an override raises a spent tenant ---------------------------------
expect_eq "$(spend acme 4)" " 200 200 200 429" "acme (free, 3/min burst 3): 3 pass, then 429"
ov set tenant tenant=acme --rate 600/min --burst 100 >"$TMP/o" 2>&1
ok $? "override set tenant tenant=acme --rate 600/min --burst 100"
set -- $(raised acme)
expect_eq "${1:-}" 200 "the first answer under the raised limit (q=100) is a 200, not a 429"
[ -n "${2:-}" ] && [ "$2" -ge 90 ] 2>/dev/null
ok $? "its r is near 100: 4 spent of 100 (got '${2:-}')"
expect_eq "$(spend acme 20)" "$(printf ' 200%.0s' $(seq 20))" "20 more requests of acme pass at once"

# ---- 2. a plan raised in Redis -----------------------------------------------
expect_eq "$(spend upco 4)" " 200 200 200 429" "upco (free): 3 pass, then 429"
$RC HSET plans upco pro >/dev/null
sleep 1.3	# > cache: 1s
set -- $(raised upco)
expect_eq "${1:-}" 200 "HSET plans upco pro: the first answer under pro (q=100) is a 200"
[ -n "${2:-}" ] && [ "$2" -ge 90 ] 2>/dev/null
ok $? "its r is near 100 (got '${2:-}')"

# ---- 3. an override deleted: back under 3/min with what was spent ------------
ov set tenant tenant=delco --rate 600/min --burst 100 >/dev/null 2>&1
ok $? "override set tenant tenant=delco --rate 600/min --burst 100"
set -- $(raised delco)
expect_eq "${1:-}" 200 "delco passes under the override"
expect_eq "$(spend delco 20)" "$(printf ' 200%.0s' $(seq 20))" "delco spends 20 more under the override"
ov del tenant tenant=delco >/dev/null 2>&1
ok $? "override del tenant tenant=delco"
back() { req -H 'X-Tenant: delco' "$URL/" >/dev/null; [ "$(q_of_last)" = 3 ]; }
until_ok 30 back
ok $? "delco is back under q=3 within 3 s"
expect_eq "$(req -H 'X-Tenant: delco' "$URL/")" 429 "delco spent 21 of 3: 429 under 3/min"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"

finish
