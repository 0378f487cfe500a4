#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Reserve, then settle (issue 19, item 3) against a real redis-server,
# through the agent, for each algorithm that takes reserve: (gcra,
# token-bucket, fixed-window, sliding-window), a budget of 1000 units:
#   - the reservation is held at admission (remaining drops by it, and a
#     request whose reservation does not fit is 429), and its record
#     "<key>:r:<id>" carries the lease as its TTL;
#   - a settle under the reservation refunds the difference, one over it
#     charges the difference; repeated 5 times it changes nothing more;
#   - a settle for an id never reserved changes nothing;
#   - a malformed cost keeps the reservation as the charge;
#   - many requests in parallel on three agents never hold more than the
#     budget (0 over-admission), and Redis holds exactly what fits;
# and a settle after the lease (1 s here) changes nothing. The metrics
# count units reserved, charged and refunded, unmatched settles and
# rejected costs.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); AP2=$(port 3); MP=$(port 4); AP3=$(port 5)
ALGOS="gcra token-bucket fixed-window sliding-window"
rules() {
	for a in $ALGOS; do
		case $a in
		gcra|token-bucket) lim="rate: 1000/d
    burst: 1000";;
		*) lim="limit: 1000
    window: 1d";;
		esac
		cat <<YAML
  - name: $a
    message: rl-$a
    key: "t:{tenant}"
    algorithm: $a
    $lim
    reserve: "{max_tokens}"
    cost: "{cost}"
    lease: 1h
    result_message: rl-$a-response
    fail: closed
YAML
	done
	cat <<YAML
  - name: late
    message: rl-late
    key: "t:{tenant}"
    algorithm: gcra
    rate: 1000/d
    burst: 1000
    reserve: 300
    cost: "{cost}"
    lease: 1s
    result_message: rl-late-response
YAML
}
# (not a pipe into redis_agent_up: its Redis and agent would be started in
# a subshell, and the EXIT trap would not know their pids)
{
	echo "processing_timeout: 1s"
	echo "metrics: { listen: 127.0.0.1:$MP }"
	echo "rules:"
	rules
} >"$TMP/rules.yaml"
redis_agent_up 2 500ms <"$TMP/rules.yaml" || { ok 1 "the agent starts"; finish; }
{
	policy_top "$AP2" "redis://127.0.0.1:$RP/0" 500ms 2
	echo "processing_timeout: 1s"
	echo "rules:"
	rules
} >"$TMP/policy2.yaml"
AGENT_LOG=$TMP/agent2.log agent_up "$TMP/policy2.yaml"
sed "s/^listen: 127.0.0.1:$AP2/listen: 127.0.0.1:$AP3/" "$TMP/policy2.yaml" \
	>"$TMP/policy3.yaml"
AGENT_LOG=$TMP/agent3.log agent_up "$TMP/policy3.yaml"

c() { "$CLIENT" -a "127.0.0.1:$AP" "$@" | grep '^ack'; }
# req ALGO TENANT ID UNITS: the request phase, its ack
req() { c "rl-$1" tenant=s:$2 id=s:$3 max_tokens=s:$4; }
# settle ALGO TENANT ID COST (TYPE:VALUE)
settle() { c "rl-$1-response" tenant=s:$2 id=s:$3 status=i:200 cost=$4 >/dev/null; }
# left ALGO TENANT: the units left (a reservation of 0 only peeks)
left() { req "$1" "$2" peek 0 | field remaining; }
m() { metric "$MP" "$1{rule=\"$2\"}"; }

for a in $ALGOS; do
	t=a-$a
	out=$(req $a $t r1 300)
	echo "$out" | grep -q 'status=0' && echo "$out" | grep -q 'response=1'
	ok $? "$a: a reservation of 300 passes and asks for rl-response"
	expect_eq "$(echo "$out" | field remaining)" 700 "$a: held at admission"
	ttl=$(rc "$RP" pttl "rl:{$a:t:$t}:r:r1")
	[ "$ttl" -gt 3500000 ] && [ "$ttl" -le 3600000 ]
	ok $? "$a: its record lives for the lease, in the key's slot (pttl $ttl)"
	req $a $t r2 300 >/dev/null; req $a $t r3 300 >/dev/null
	expect_eq "$(req $a $t r4 300 | field status)" 429 \
		"$a: 900 held: a fourth reservation of 300 does not fit"
	settle $a $t r1 i:100
	expect_eq "$(left $a $t)" 300 "$a: settled at 100: 200 refunded"
	settle $a $t r2 s:0
	expect_eq "$(left $a $t)" 600 "$a: settled at 0: all 300 refunded"
	for n in 1 2 3 4 5; do settle $a $t r3 s:450; done
	expect_eq "$(left $a $t)" 450 \
		"$a: settled at 450 five times: 150 charged once"
	settle $a $t never i:10
	expect_eq "$(left $a $t)" 450 "$a: a settle never reserved changes nothing"
	for bad in s:-1 s:2.5 s:abc s:9007199254740993 n:; do
		req $a $t "bad$bad" 10 >/dev/null
		settle $a $t "bad$bad" $bad
		settle $a $t "bad$bad" i:0
	done
	expect_eq "$(left $a $t)" 400 \
		"$a: malformed costs keep their reservations (5 of 10)"
	expect_eq "$(m spoa_rl_reserve_units_reserved_total $a)" 950 \
		"$a: units reserved counted"
	expect_eq "$(m spoa_rl_reserve_units_refunded_total $a)" 500 \
		"$a: units refunded counted"
	expect_eq "$(m spoa_rl_response_units_charged_total $a)" 150 \
		"$a: units charged beyond the reservation counted"
	expect_eq "$(m spoa_rl_reserve_settles_unmatched_total $a)" 10 \
		"$a: settles that found nothing counted (4 repeats, 1 never, 5 after a bad cost)"
	expect_eq "$(m spoa_rl_response_costs_rejected_total $a)" 5 \
		"$a: malformed costs counted"
done

# ---- no over-admission: 3 agents, 40 requests at once, 300 of 1000 each --
for a in $ALGOS; do
	t=p-$a
	cpids=""
	for n in $(seq 10); do
		case $((n % 3)) in 0) p=$AP;; 1) p=$AP2;; *) p=$AP3;; esac
		"$CLIENT" -a "127.0.0.1:$p" -n 4 -P 4 rl-$a tenant=s:$t \
			id=s:c$n max_tokens=s:300 >"$TMP/par.$a.$n" &
		cpids="$cpids $!"
	done
	wait $cpids
	got=$(cat "$TMP"/par.$a.* | grep '^ack' | grep -c 'status=0 ')
	acks=$(cat "$TMP"/par.$a.* | grep -c '^ack')
	late=$(cat "$TMP"/par.$a.* | grep '^ack' | grep -c 'status=503 ')
	# fail: closed: an answer past redis.timeout (a busy machine) is a
	# 503, never an admission; Redis' own count must still be 3
	[ "$acks" = 40 ] && [ "$got" -le 3 ] && [ $((got + late)) -ge 3 ]
	ok $? "$a: 40 parallel reservations of 300 on 3 agents: none over (admitted $got, late $late)"
	expect_eq "$(left $a $t)" 100 "$a: Redis held exactly 3 of them (900)"
done

# ---- after the lease --------------------------------------------------------
c rl-late tenant=s:late id=s:l1 >/dev/null
sleep 1.5
c rl-late-response tenant=s:late id=s:l1 status=i:200 cost=s:0 >/dev/null
expect_eq "$(c rl-late tenant=s:late id=s:l2 | field remaining)" 400 \
	"a settle after the lease refunds nothing (300 + 300 held)"
expect_eq "$(m spoa_rl_reserve_settles_unmatched_total late)" 1 \
	"and is counted as unmatched"
# ---- Redis down, fail: local -------------------------------------------------
# The local tier holds a reservation (its share of the limit) and records
# it, as the script does: the settle refunds what was not used, exactly
# once; a second settle of the same id finds nothing (unmatched). Never an
# overspend.
DEAD=$(port 6); AP4=$(port 7); MP4=$(port 8)
{
	policy_top "$AP4" "redis://127.0.0.1:$DEAD/0" 50ms 1
	cat <<YAML
processing_timeout: 1s
metrics: { listen: 127.0.0.1:$MP4 }
rules:
  - name: fl
    message: rl-fl
    key: "t:{tenant}"
    rate: 1000/d
    burst: 1000
    reserve: "{max_tokens}"
    cost: "{cost}"
    result_message: rl-fl-response
    fail: local
YAML
} >"$TMP/policy4.yaml"
AGENT_LOG=$TMP/agent4.log agent_up "$TMP/policy4.yaml"
c4() { "$CLIENT" -a "127.0.0.1:$AP4" "$@" | grep '^ack'; }
codes=""
for n in 1 2 3 4; do
	codes="$codes $(c4 rl-fl tenant=s:x id=s:f$n max_tokens=s:300 | field status)"
done
expect_eq "$codes" " 0 0 0 429" \
	"Redis down, fail: local: 3 reservations of 300 of 1000 pass, the 4th is 429"
c4 rl-fl-response tenant=s:x id=s:f1 status=i:200 cost=s:0 >/dev/null
expect_eq "$(metric "$MP4" 'spoa_rl_reserve_units_refunded_total{rule="fl"}')" 300 \
	"the local tier settles: the 300 f1 held are given back"
expect_eq "$(c4 rl-fl tenant=s:x id=s:f5 max_tokens=s:300 | field status)" 0 \
	"so a reservation of 300 passes again"
expect_eq "$(c4 rl-fl tenant=s:x id=s:f6 max_tokens=s:300 | field status)" 429 \
	"and the next one is 429: 900 held again"
c4 rl-fl-response tenant=s:x id=s:f1 status=i:200 cost=s:0 >/dev/null
expect_eq "$(c4 rl-fl tenant=s:x id=s:f7 max_tokens=s:300 | field status)" 429 \
	"a second settle of f1 refunds nothing"
expect_eq "$(metric "$MP4" 'spoa_rl_reserve_settles_unmatched_total{rule="fl"}')" 1 \
	"and is counted as unmatched"
c4 rl-fl-response tenant=s:x id=s:f2 status=i:200 cost=s:500 >/dev/null
expect_eq "$(metric "$MP4" 'spoa_rl_response_units_charged_total{rule="fl"}')" 200 \
	"a settle over the reservation charges the difference (500 - 300)"

grep -q 'msg=settle_unmatched rule=gcra' "$TMP/agent.log"
ok $? "unmatched settles are logged"
lines=$(grep -c 'msg=settle_unmatched rule=gcra' "$TMP/agent.log")
[ "$lines" -ge 1 ] && [ "$lines" -le 2 ]
ok $? "at most once per 10 s per rule and worker (10 settles, 2 workers: $lines lines)"
finish
