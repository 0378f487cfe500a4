#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Every algorithm through the shipped haproxy.cfg: one rule per phase (the
# agent is restarted on a new policy between phases, Redis and HAProxy
# stay), each lets exactly what the policy says through and then answers
# 429 with a Retry-After that matches the rule's period:
#   gcra, token-bucket, leaky-bucket (meter): rate 3/min, burst 3
#   fixed-window 3 per 1h, sliding-window 3 per 1h, sliding-log 3 per 15m
#   token-bucket with cost from the content-length arg
#   concurrency: 2 in flight, a third refused, slots freed by rl-done
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

# phase NAME RULE-YAML: writes a policy with that one rule (indented as a
# list item under rules:) and (re)starts the agent on it.
phase() {
	{
		policy_head 50ms
		cat <<EOF
rules:
$2
EOF
	} >"$POLICY"
	policy_valid "$1: the policy passes -c"
	restart_agent "$POLICY"
	ok $? "$1: agent up on the new policy, UP per the health check"
}

# burst NAME TENANT N: N+1 requests; expects N x 200 then 429, r counting
# down N-1..0, and prints nothing (records assertions). Leaves the 429's
# headers in $TMP/h.
burst() {
	codes=""; rs=""; want=""; wr=""
	BURST_T0=$EPOCHREALTIME
	for i in $(seq "$3"); do
		codes="$codes $(req -H "X-Tenant: $2" "$URL/")"
		rs="$rs $(sf_param "$(hdr RateLimit)" r)"
		want="$want 200"; wr="$wr $(($3 - i))"
	done
	codes="$codes $(req -H "X-Tenant: $2" "$URL/")"
	want="$want 429"
	expect_eq "$codes" "$want" "$1: $3 allowed, then 429"
	expect_eq "$rs" "$wr" "$1: RateLimit r counts down to 0"
}

# retry_in NAME LO HI: the last 429's Retry-After is in [LO, HI], and not
# earlier than the RateLimit t.
retry_in() {
	ra=$(hdr Retry-After); t=$(sf_param "$(hdr RateLimit)" t)
	is_posint "$ra" && [ "$ra" -ge "$2" ] && [ "$ra" -le "$3" ]
	ok $? "$1: Retry-After in [$2, $3] (got '$ra')"
	is_posint "$t" && [ "$ra" -ge "$t" ]
	ok $? "$1: Retry-After ($ra) >= t ($t)"
}

# retry_rate NAME: the 429 after a burst of 3 at 3/min: the first unit
# frees 20 s after the burst's first request, so Retry-After is 20 less
# the time since then (since_ceil), up to 21.
retry_rate() { retry_in "$1" "$(since_ceil "$BURST_T0" 20)" 21; }

start_redis "$REDIS_PORT"
start_haproxy "$HAP_CFG"
wait_port "$HAP_PORT" 10 && wait_port "$STATS_PORT" 5
ok $? "redis and haproxy up"

# ---- gcra --------------------------------------------------------------------
phase gcra '  - name: g
    message: rl-request
    key: "g:{tenant}"
    algorithm: gcra
    rate: 3/min
    burst: 3
    missing: deny'
burst gcra a1 3
retry_rate gcra
expect_eq "$(hdr RateLimit-Policy)" '"g";q=3;w=60' "gcra: RateLimit-Policy q=3;w=60"
expect_eq "$(req -H 'X-Tenant: a2' "$URL/")" 200 "gcra: another tenant has its own bucket"

# ---- token-bucket ------------------------------------------------------------
phase token-bucket '  - name: tb
    message: rl-request
    key: "tb:{tenant}"
    algorithm: token-bucket
    rate: 3/min
    burst: 3
    missing: deny'
burst token-bucket b1 3
retry_rate token-bucket

# ---- token-bucket, cost from an arg -----------------------------------------
phase token-bucket-cost '  - name: bytes
    message: rl-request
    key: "bytes:{tenant}"
    algorithm: token-bucket
    rate: 1000/day
    burst: 1000
    cost: "{size}"
    missing: skip'
body600=$(head -c 600 /dev/zero | tr '\0' x)
body300=$(head -c 300 /dev/zero | tr '\0' x)
c1=$(req -X POST -H 'X-Tenant: c1' --data-binary "$body600" "$URL/")
r1=$(sf_param "$(hdr RateLimit)" r)
c2=$(req -X POST -H 'X-Tenant: c1' --data-binary "$body600" "$URL/")
c3=$(req -X POST -H 'X-Tenant: c1' --data-binary "$body300" "$URL/")
r3=$(sf_param "$(hdr RateLimit)" r)
expect_eq "$c1 $c2 $c3" "200 429 200" "token-bucket cost {size}: 600 of 1000 passes, 600 more does not, 300 does"
expect_eq "$r1 $r3" "400 100" "token-bucket cost {size}: remaining 400, then 100 (the refused 600 not charged)"
expect_eq "$(req -H 'X-Tenant: c1' "$URL/")" 200 "token-bucket cost {size}: a GET (no content-length) follows missing: skip"

# ---- leaky-bucket (meter) ----------------------------------------------------
phase leaky-bucket '  - name: lb
    message: rl-request
    key: "lb:{tenant}"
    algorithm: leaky-bucket
    rate: 3/min
    burst: 3
    missing: deny'
burst leaky-bucket d1 3
retry_rate leaky-bucket

# ---- fixed-window ------------------------------------------------------------
# Not across an hour boundary (the window is aligned to the epoch).
left=$((3600 - $(date +%s) % 3600))
[ "$left" -lt 15 ] && sleep $((left + 1))
phase fixed-window '  - name: fw
    message: rl-request
    key: "fw:{tenant}"
    algorithm: fixed-window
    limit: 3
    window: 1h
    missing: deny'
burst fixed-window e1 3
left=$((3600 - $(date +%s) % 3600))
retry_in fixed-window $((left - 3)) $((left + 2))
expect_eq "$(hdr RateLimit-Policy)" '"fw";q=3;w=3600' "fixed-window: RateLimit-Policy q=3;w=3600"
n='rl:{fw:fw:e1}'
expect_eq "$(redis-cli -p "$REDIS_PORT" HVALS "$n")" 3 "fixed-window: the window counter in Redis is 3 (the 429 not counted)"
ttl=$(redis-cli -p "$REDIS_PORT" PTTL "$n")
[ "$ttl" -gt 0 ] 2>/dev/null; ok $? "fixed-window: the counter has an expiry (pttl $ttl)"

# ---- sliding-window ----------------------------------------------------------
phase sliding-window '  - name: sw
    message: rl-request
    key: "sw:{tenant}"
    algorithm: sliding-window
    limit: 3
    window: 1h
    missing: deny'
burst sliding-window f1 3
# The 3 weigh 3 * (W - e) / W in the next window, never rounded down: a
# fourth waits for the boundary, then 1200 s for them to weigh 2
# (ALGORITHMS.md), (3600 - e) + 1200 s with e the seconds into the hour.
e=$(($(date +%s) % 3600))
retry_in sliding-window $((4800 - e - 1)) $((4800 - e + 2))

# ---- sliding-log -------------------------------------------------------------
phase sliding-log '  - name: sl
    message: rl-request
    key: "sl:{tenant}"
    algorithm: sliding-log
    limit: 3
    window: 15m
    missing: deny'
burst sliding-log g1 3
retry_in sliding-log 895 900
expect_eq "$(redis-cli -p "$REDIS_PORT" ZCARD 'rl:{sl:sl:g1}')" 3 "sliding-log: 3 entries in the sorted set (the 429 not logged)"

# ---- concurrency -------------------------------------------------------------
phase concurrency '  - name: cc
    message: rl-request
    key: "cc:{tenant}"
    algorithm: concurrency
    limit: 2
    lease: 5m
    id: "{id}"
    release: rl-done
    missing: deny'
codes=""
for i in 1 2 3 4 5; do codes="$codes $(req -H 'X-Tenant: h1' "$URL/")"; done
expect_eq "$codes" " 200 200 200 200 200" "concurrency: sequential requests all pass (rl-done frees each slot)"
for i in 1 2; do
	curl -s -o /dev/null -w '%{http_code}' --max-time 3 -H 'X-Tenant: h2' \
		"$URL/slow" >"$TMP/slow$i" 2>/dev/null &
	eval "slow$i=\$!"
done
sleep 0.4
c=$(req -H 'X-Tenant: h2' "$URL/")
ra=$(hdr Retry-After)
wait "$slow1" "$slow2"
expect_eq "$(cat "$TMP/slow1") $(cat "$TMP/slow2") $c" "200 200 429" "concurrency: 2 in flight pass, a third is refused"
is_posint "$ra"; ok $? "concurrency: the 429 has a positive Retry-After ('$ra')"
expect_eq "$(req -H 'X-Tenant: h2' "$URL/")" 200 "concurrency: once they are done a slot is free"
sleep 0.3	# the last rl-done is sent after the response went out
expect_eq "$(redis-cli -p "$REDIS_PORT" ZCARD 'rl:{cc:cc:h2}')" 0 "concurrency: no lease left in Redis"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"
! grep -q 'rl_degraded=1' "$TMP/haproxy.log"
ok $? "no degraded decision"

finish
