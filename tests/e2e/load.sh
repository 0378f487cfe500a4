#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Concurrent traffic through HAProxy (wrk, 8 connections, 3 s) for one
# tenant limited to 100/s with a burst of 20: every request is answered 200
# or 429 (no 500, no 503, no SPOE timeout), and the number let through
# stays within burst + rate x time: the check-and-charge is atomic even
# with many requests of one key in flight at once.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent
command -v wrk >/dev/null || { echo "not ok - wrk not installed (make deps)"; FAIL=1; finish; }

# A Redis budget of 50ms (still under timeout processing 100ms): this test
# is about atomicity under concurrency, not latency on a loaded 2-CPU box;
# a degraded (fail: open) decision would admit uncharged requests.
write_policy 20 100/s 50ms
start_stack
ok $? "stack up, agent UP"

start=$(date +%s.%N)
wrk -t 1 -c 8 -d 3s -H 'X-Tenant: busy' "$URL/" >"$TMP/wrk.out" 2>&1
end=$(date +%s.%N)
ok $? "wrk ran"
sleep 0.3

# Status codes from HAProxy's own log lines of the frontend.
fe_codes "$TMP/haproxy.log" | sort | uniq -c >"$TMP/codes"
n200=$(awk '$2 == 200 { print $1 }' "$TMP/codes"); n200=${n200:-0}
n429=$(awk '$2 == 429 { print $1 }' "$TMP/codes"); n429=${n429:-0}
other=$(awk '$2 != 200 && $2 != 429 { printf "%s x%s ", $2, $1 }' "$TMP/codes")
echo "# $(tr '\n' ' ' <"$TMP/codes")"
[ $((n200 + n429)) -gt 500 ]; ok $? "a few hundred requests at least ($((n200 + n429)))"
expect_eq "$other" "" "every answer is 200 or 429"
[ "$n429" -gt 0 ]; ok $? "the limit bites (some 429)"
max=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%d", 20 + 100 * (e - s) + 5 }')
min=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%d", 100 * (e - s - 1) }')
[ "$n200" -le "$max" ]; ok $? "no over-admission: $n200 allowed <= burst + rate x time ($max)"
[ "$n200" -ge "$min" ]; ok $? "no under-admission: $n200 allowed >= $min"
! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE errors (every NOTIFY ACKed within timeout processing)"
ndeg=$(grep -c 'rl_degraded=1' "$TMP/haproxy.log")
expect_eq "$ndeg" 0 "no degraded decisions (Redis within its 50ms budget)"

finish
