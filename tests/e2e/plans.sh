#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Plans through the shipped haproxy.cfg (X-Tenant -> tenant arg, X-Plan ->
# plan arg). Plans free (burst 3) and pro (burst 10); a gcra rule with
# plan: rate. A tenant's plan comes from, in order: the static tenants:
# override, the plan arg, the Redis hash "plans" (cached 1s), the default
# (free). Checked by the number of requests let through and by the q of
# RateLimit-Policy. A plan changed with HSET applies after the cache time
# with no reload: a stale entry is answered while it is refreshed (one per
# worker at most), so the new plan must win within a few requests.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

{
	policy_head 50ms
	cat <<EOF
plans:
  free: { rate: 5/min, burst: 3 }
  pro:  { rate: 10/min, burst: 10 }
tenants: { acme: pro, cheapco: free }
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
"$AGENT" -c -f "$POLICY" >/dev/null 2>&1
ok $? "the plans policy passes -c"
start_stack
ok $? "stack up, agent UP"
RC="redis-cli -p $REDIS_PORT"

q_of_last() { sf_param "$(hdr RateLimit-Policy)" q; }

# count TENANT [PLAN]: requests until the first 429 (at most 15); prints
# "ALLOWED Q" with Q the RateLimit-Policy q of the 429. One curl sends
# them one after the other on one connection, in a few ms: a curl per
# request let a loaded host take long enough for pro's 10/min (6 s) to
# refill a unit before the next check.
count() {
	curl -s --max-time 10 -H "X-Tenant: $1" ${2:+-H "X-Plan: $2"} \
		-o "$TMP/cnt_#1" -w '%{http_code} %header{ratelimit-policy}\n' \
		"$URL/?i=[1-15]" >"$TMP/cnt" 2>/dev/null
	awk '{ c = $1; p = $2 } c != 200 { exit } { n++ }
		END { sub(/.*;q=/, "", p); sub(/;.*/, "", p)
			if (c == 429) print n + 0, p; else print n + 0, "status-" c }' "$TMP/cnt"
}

# ---- where the plan comes from -------------------------------------------
expect_eq "$(count acme)" "10 10" "acme (tenants: pro): 10 pass, then 429; q=10"
# at once, before pro's next unit (6 s after acme's first request)
c=$(req -H 'X-Tenant: acme' -H 'X-Plan: free' "$URL/")
expect_eq "$c $(q_of_last)" "429 10" "acme with X-Plan: free: still pro (q=10)"
expect_eq "$(count cheapco pro)" "3 3" "cheapco (tenants: free) with X-Plan: pro: the static override wins (3, q=3)"
expect_eq "$(count argpro pro)" "10 10" "X-Plan: pro (plan arg): 10, q=10"
expect_eq "$(count argfree free)" "3 3" "X-Plan: free (plan arg): 3, q=3"
expect_eq "$(count nobody)" "3 3" "no plan anywhere: the default (free): 3, q=3"
expect_eq "$(count goldco gold)" "3 3" "X-Plan naming no plan: the default (free)"

# converge TENANT Q: after the cache time, requests 100 ms apart until 3 in
# a row report q=Q (at most 8). Prints "STALE OK CODE": how many answers
# came before the run of 3, 1 when it was reached, and the status of the
# first answer of the run.
converge() {
	stale=0; run=0; n=0; first=none
	while [ $n -lt 8 ] && [ $run -lt 3 ]; do
		c=$(req -H "X-Tenant: $1" "$URL/")
		if [ "$(q_of_last)" = "$2" ]; then
			[ $run = 0 ] && first=$c
			run=$((run + 1))
		else stale=$((stale + run + 1)); run=0; fi
		n=$((n + 1)); sleep 0.1
	done
	echo "$stale $([ $run -ge 3 ] && echo 1 || echo 0) $first"
}
ok_of() { r=${1#* }; echo "${r% *}"; }

# ---- from the Redis hash ----------------------------------------------------
$RC HSET plans hashco pro >/dev/null
r=$(converge hashco 10); stale=${r%% *}
expect_eq "$(ok_of "$r")" 1 "hashco (HSET plans hashco pro): pro (q=10) once looked up (stale answers: $stale)"
[ "$stale" -le 2 ]; ok $? "at most one answer per worker before the lookup ($stale)"
expect_eq "$(count hashco2)" "3 3" "a tenant not in the hash: the default"

# ---- a plan changed in Redis applies after the cache time, no reload -------
agent_pid0=$AGENT_PID
expect_eq "$(count up1)" "3 3" "up1 (not in the hash): free, 3 then 429"
$RC HSET plans up1 pro >/dev/null
sleep 1.3	# > cache: 1s
r=$(converge up1 10); stale=${r%% *}
expect_eq "$(ok_of "$r")" 1 "HSET plans up1 pro: pro (q=10) after the cache time (stale answers: $stale)"
[ "$stale" -le 2 ]; ok $? "at most one stale answer per worker ($stale)"
expect_eq "${r##* }" 200 "up1 is allowed again under pro's burst (the first pro answer is a 200)"

$RC HSET plans hashco free >/dev/null
sleep 1.3
r=$(converge hashco 3); stale=${r%% *}
expect_eq "$(ok_of "$r")" 1 "HSET plans hashco free: back to free (q=3) after the cache time (stale answers: $stale)"
[ "$stale" -le 2 ]; ok $? "at most one stale answer per worker ($stale)"

$RC HDEL plans up1 >/dev/null
sleep 1.3
r=$(converge up1 3)
expect_eq "$(ok_of "$r")" 1 "HDEL plans up1: the default (free) after the cache time"

# The static override is not affected by the hash.
$RC HSET plans cheapco pro >/dev/null
sleep 1.3
r=$(converge cheapco 3)
expect_eq "$(ok_of "$r")" 1 "HSET plans cheapco pro does not beat tenants: cheapco: free"

kill -0 "$agent_pid0" 2>/dev/null; ok $? "same agent process throughout"
! grep -q 'msg=reloaded' "$TMP/agent.log"; ok $? "no reload happened"
! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"
! grep -q 'rl_degraded=1' "$TMP/haproxy.log"
ok $? "no degraded decision"

finish
