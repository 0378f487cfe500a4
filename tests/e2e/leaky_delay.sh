#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The leaky bucket in delay mode through haproxy: rate 10/s, burst 1,
# max_delay 300ms. Five requests fired at once are answered one slot
# (~100 ms) apart: the agent holds each ACK until the request's slot, and
# the ones that would wait past max_delay get 429 at once. Spaced-out
# requests are not delayed.
#
# The shipped spoe-ratelimit.conf has "timeout processing 100ms", shorter
# than this max_delay: HAProxy would give up on the held ACKs (txn.rl.error
# = 1, fail open). This test runs a copy of it in $TMP with
# "timeout processing 2s"; a delay-mode rule needs timeout processing >
# max_delay + the Redis timeout.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

sed 's/^\( *timeout processing\) .*/\1 2s/' "$ROOT/haproxy/spoe-ratelimit.conf" >"$TMP/spoe.conf"
grep -q '^ *timeout processing 2s$' "$TMP/spoe.conf"
ok $? "test SPOE conf: timeout processing 2s"
export RL_SPOE_CONF="$TMP/spoe.conf"

{
	policy_head 50ms
	cat <<EOF
processing_timeout: 2s     # the test SPOE conf's timeout processing
rules:
  - name: pace
    message: rl-request
    key: "pace:{tenant}"
    algorithm: leaky-bucket
    rate: 10/s
    burst: 1
    mode: delay
    max_delay: 300ms
    missing: deny
EOF
} >"$POLICY"
"$AGENT" -c -f "$POLICY" >/dev/null 2>&1
ok $? "the delay-mode policy passes -c"
start_stack
ok $? "stack up, agent UP"

# burst TENANT N: fires N requests at once; "code end_ms retry-after"
# lines, sorted by end time (from the start), in $TMP/burst. One curl
# starts the N transfers together (-Z --parallel-immediate): N background
# curls could start far enough apart on a loaded host for the bucket to
# leak between them, and then all 5 passed.
burst() {
	curl -s -Z --parallel-immediate --parallel-max "$2" --max-time 3 \
		-H "X-Tenant: $1" -o "$TMP/bb_#1" \
		-w '%{http_code} %{time_total} %header{retry-after}\n' \
		"$URL/?i=[1-$2]" 2>/dev/null |
		awk '{ printf "%s %d %s\n", $1, $2 * 1000, $3 }' |
		sort -k2,2n >"$TMP/burst"
}
# check_burst NAME: 4 allowed spaced 40..250 ms apart, 1 denied early.
check_burst() {
	n200=$(grep -c '^200 ' "$TMP/burst"); n429=$(grep -c '^429 ' "$TMP/burst")
	expect_eq "$n200 $n429" "4 1" "$1: 4 of 5 pass (0, 100, 200, 300 ms <= max_delay), 1 gets 429"
	gaps=$(awk '$1 == 200 { if (p) printf " %d", $2 - p; p = $2 }' "$TMP/burst")
	echo "# $1: ends (code@ms) $(awk 'NR == 1 { s = $2 } { printf "%s@%d ", $1, $2 - s }' "$TMP/burst")gaps:$gaps"
	bad=0; ng=0
	for g in $gaps; do
		ng=$((ng + 1)); [ "$g" -ge 40 ] && [ "$g" -le 250 ] || bad=1
	done
	[ "$ng" = 3 ] && [ "$bad" = 0 ]
	ok $? "$1: the allowed ones complete ~100 ms apart (gaps$gaps ms, each in 40..250)"
	first=$(awk '$1 == 200 { print $2; exit }' "$TMP/burst")
	last=$(awk '$1 == 200 { l = $2 } END { print l }' "$TMP/burst")
	span=$((last - first))
	[ "$span" -ge 200 ] && [ "$span" -le 600 ]
	ok $? "$1: first to last allowed: $span ms (~300, in 200..600)"
	d=$(awk '$1 == 429 { print $2; exit }' "$TMP/burst")
	[ -n "$d" ] && [ "$d" -lt "$last" ]
	ok $? "$1: the request past max_delay is refused at once, not held (429 before the last 200)"
	ra=$(awk '$1 == 429 { print $3; exit }' "$TMP/burst")
	is_posint "$ra"; ok $? "$1: the 429 carries a positive Retry-After ('$ra')"
}

burst b1 5
check_burst "burst 1"

# The SPOE processing time HAProxy logged (rl_ms) is the hold.
sleep 0.2
grep 'rl_status=0 rl_policy=pace' "$TMP/haproxy.log" | sed -n 's/.* rl_ms=\([0-9]*\).*/\1/p' |
	sort -n >"$TMP/ptime"
echo "# rl_ms of the allowed ones: $(tr '\n' ' ' <"$TMP/ptime")"
awk 'NR == 1 && $1 > 60 { bad = 1 } NR == 4 && ($1 < 200 || $1 > 450) { bad = 1 } END { exit bad || NR != 4 }' "$TMP/ptime"
ok $? "haproxy's rl_ms: the first not held (< 60 ms), the 4th held ~300 ms (200..450)"

# Refused past max_delay: a 429 with a Retry-After.
grep -q 'rl_status=429 rl_policy=pace' "$TMP/haproxy.log"
ok $? "the refused one is logged as rl_status=429 by rule pace"

# Once the bucket drained, paced requests are not delayed.
sleep 0.6
slow=0
for i in 1 2 3; do
	c=$(req -H 'X-Tenant: b1' "$URL/")
	ms=$(last_time_ms)
	[ "$c" = 200 ] && [ "$ms" -lt 80 ] || slow=1
	sleep 0.25
done
expect_eq "$slow" 0 "requests at 4/s (under the rate) pass without being held"

# Another tenant is paced on its own; a second burst behaves the same.
burst b2 5
check_burst "burst 2 (another tenant)"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors (no held ACK ran past timeout processing)"
! grep -q 'rl_error=[1-9]' "$TMP/haproxy.log"
ok $? "no rl_error in haproxy's log lines"

finish
