#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# One NOTIFY may carry several messages (a spoe-group); a request holds 16
# checks in all. The checks beyond are not dropped silently: each is decided
# by its rule's fail mode, as if the store could not answer it:
#   1. within 16 checks, a multi-message NOTIFY is decided exactly: every
#      rule of every message is charged;
#   2. a fail: closed rule left out refuses the request (503, retry_after,
#      degraded), and nothing is charged: the rule, exhausted beforehand,
#      used to be skipped and the request allowed;
#   3. the same with three messages, the last one left out whole;
#   4. a fail: open rule left out: the checks that fit decide, degraded=1;
#   5. a shadow fail: closed rule left out never refuses: shadow=1;
#   6. one log line per worker per 10 s, and a counter in /metrics; the
#      message names it lists are cut at 255 bytes, and the line then says
#      so (truncated=1).
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); MP=$(port 3)
start_redis "$RP"
rule() { # NAME MESSAGE LIMIT [EXTRA]
	printf '  - { name: %s, message: %s, key: "k:{tenant}", algorithm: fixed-window, limit: %s, window: 60s%s }\n' \
		"$1" "$2" "$3" "${4:+, $4}"
}
{
	cat <<YAML
listen: 127.0.0.1:$AP
workers: 1		# one worker: one log line per 10 s in all
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 200ms }
processing_timeout: 1s
metrics: { listen: "127.0.0.1:$MP" }
rules:
YAML
	# rl-a: 9 rules; rl-b, rl-c, rl-s: 8 rules, then one of limit 1 that
	# a NOTIFY carrying rl-a first leaves out; rl-d: 3 rules
	for n in 1 2 3 4 5 6 7 8 9; do rule "a$n" rl-a 100; done
	for m in b c s; do
		for n in 1 2 3 4 5 6 7 8; do rule "$m$n" "rl-$m" 100; done
	done
	rule b9 rl-b 1 "fail: closed"
	rule c9 rl-c 1 "fail: open"
	rule s9 rl-s 1 "fail: closed, shadow: true"
	for n in 1 2 3; do rule "d$n" rl-d 100; done
} >"$TMP/policy.yaml"
agent_up "$TMP/policy.yaml"
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@" | grep '^ack'; }
charged() { redis-cli -p "$RP" --scan --pattern "rl:{*:k:$1}" | wc -l | tr -d ' '; }
vars() { # ACK-LINE: "status retry_after degraded shadow", retry_after - if none
	echo "$(echo "$1" | field status) $(echo "$1" | field retry_after | grep . || echo -)" \
		"$(echo "$1" | field degraded) $(echo "$1" | field shadow)"
}
# spent_then_after_a MSG TENANT: MSG alone (9 checks, spending its 9th rule),
# then rl-a + MSG in one NOTIFY, whose ACK goes to $out
spent_then_after_a() {
	expect_eq "$(vars "$(c "$1" "tenant=s:$2")")" "0 - 0 0" \
		"$1 alone (9 checks): allowed, its 9th rule spent"
	out=$(c rl-a "tenant=s:$2" + "$1" "tenant=s:$2")
}

# ---- 1. within 16 checks ----------------------------------------------------
out=$(c rl-a tenant=s:t1 + rl-d tenant=s:t1)
expect_eq "$(vars "$out")" "0 - 0 0" "rl-a + rl-d (12 checks): allowed, not degraded"
expect_eq "$(echo "$out" | grep -o '";r=99;' | wc -l | tr -d ' ')" "12" \
	"rl-a + rl-d: the RateLimit field has all 12 rules, each charged once"
expect_eq "$(charged t1)" "12" "rl-a + rl-d: 12 keys in Redis"

# ---- 2. a fail: closed rule left out ------------------------------------------
spent_then_after_a rl-b t2
expect_eq "$(vars "$out")" "503 1 1 0" \
	"rl-a + rl-b (18 checks): b9 (fail: closed) left out refuses with 503"
expect_eq "$(echo "$out" | field policy)" "b9" "rl-a + rl-b: the deciding rule is b9"
expect_eq "$(charged t2)" "9" "rl-a + rl-b: the refused request is charged nowhere"

# ---- 3. three messages, the last left out whole --------------------------------
out=$(c rl-d tenant=s:t3 + rl-a tenant=s:t3 + rl-b tenant=s:t3)
expect_eq "$(vars "$out")" "503 1 1 0" \
	"rl-d + rl-a + rl-b (21 checks): b5..b9 left out, b9 refuses with 503"
expect_eq "$(charged t3)" "0" "rl-d + rl-a + rl-b: charged nowhere"

# ---- 4. a fail: open rule left out -----------------------------------------------
spent_then_after_a rl-c t4
expect_eq "$(vars "$out")" "0 - 1 0" \
	"rl-a + rl-c: c9 (fail: open) left out, the 16 that fit allow, degraded"
expect_eq "$(echo "$out" | grep -o '"c[0-9]";r=[0-9]*' | tr '\n' ' ')" \
	'"c1";r=98 "c2";r=98 "c3";r=98 "c4";r=98 "c5";r=98 "c6";r=98 "c7";r=98 ' \
	"rl-a + rl-c: c1..c7 were charged a second time, c8 and c9 were not evaluated"
expect_eq "$(echo "$out" | grep -o '"a[0-9]";r=99' | wc -l | tr -d ' ')" "9" \
	"rl-a + rl-c: a1..a9 were charged"

# ---- 5. a shadow fail: closed rule left out ---------------------------------------
spent_then_after_a rl-s t5
expect_eq "$(vars "$out")" "0 - 1 1" \
	"rl-a + rl-s: s9 (shadow, fail: closed) left out never refuses; shadow=1"

# ---- 6. visible ----------------------------------------------------------------------
expect_eq "$(metric "$MP" spoa_rl_notify_too_many_checks_total)" "4" \
	"/metrics counts the 4 NOTIFYs with too many checks"
lines=$(grep -c 'msg=notify_too_many_checks' "$TMP/agent.log")
expect_eq "$lines" "1" "one log line per worker per 10 s"
grep 'msg=notify_too_many_checks' "$TMP/agent.log" |
	grep -q 'messages="rl-a,rl-b" checks=18 limit=16 dropped=2 rule=b9 answer=503'
ok $? "the log line names the messages, the counts and the deciding rule"
grep -q 'msg=notify_too_many_checks.*hint="split the spoe-group' "$TMP/agent.log"
ok $? "the log line says to split the spoe-group"
! grep -q 'msg=notify_too_many_checks.*truncated=1' "$TMP/agent.log"
ok $? "its message names fit: no truncated=1"
# the next window's line, for a NOTIFY whose names pass 255 bytes (the
# peer chose them: a third message of 300 bytes no rule knows)
sleep 10.2
c rl-a tenant=s:t6 + rl-b tenant=s:t6 + "$(head -c 300 /dev/zero | tr '\0' m)" tenant=s:t6 >/dev/null
until_ok 20 eval '[ "$(grep -c msg=notify_too_many_checks "$TMP/agent.log")" -eq 2 ]'
grep 'msg=notify_too_many_checks' "$TMP/agent.log" | tail -n 1 |
	grep -Eq 'messages="rl-a,rl-b,m{245}" checks=18 .*hint="split the spoe-group: one NOTIFY holds 16 checks" truncated=1$'
ok $? "names past 255 bytes: cut, and the line says so ($(grep msg=notify_too_many_checks "$TMP/agent.log" | tail -n 1 | cut -c 1-90)...)"
finish
