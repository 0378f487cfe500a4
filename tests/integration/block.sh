# SPDX-License-Identifier: Apache-2.0
# The penalty box (block:, block_max:; limiter.h "penalty box") against a
# real redis-server and two agents sharing it:
#   a key the rule denies is denied for the block period, Retry-After
#   counting down, then released; the other agent agrees (the record is in
#   Redis); escalation doubles the block per repeat offence and is capped
#   at block_max; past the quiet period the offences are forgotten; a
#   blocked key costs no script call (the near-cache answers it); `key
#   show` prints the block; `key reset` clears it on both agents, their
#   near-caches included; spoa_rl_blocked_total counts; a store: local
#   rule keeps its box in the agent; -c refuses bad values.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP1=$(port 2); AP2=$(port 3); MP=$(port 4)
start_redis "$RP"
policy() { # AGENT_PORT [METRICS_PORT]
	# one worker: one near-cache per agent, the flood below is counted on it
	policy_top "$1" "redis://127.0.0.1:$RP/0" 100ms 1
	cat <<YAML
processing_timeout: 1s
rules:
  - { name: ban, message: rl-request, key: "u:{user}", rate: 2/s, burst: 2, block: 3s }
  - { name: esc, message: rl-esc, key: "e:{user}", rate: 1/s, burst: 1, block: 1s, block_max: 4s }
  - { name: sw, message: rl-sw, key: "s:{user}", algorithm: sliding-window, limit: 1, window: 1h, block: 30s }
  - { name: plain, message: rl-plain, key: "p:{user}", rate: 1/h, burst: 1 }
  - { name: loc, message: rl-loc, key: "l:{user}", rate: 2/s, burst: 2, block: 2s, store: local }
YAML
	[ -n "${2:-}" ] && echo "metrics: { listen: \"127.0.0.1:$2\" }"
}
policy "$AP1" "$MP" >"$TMP/p1.yaml"
policy "$AP2" >"$TMP/p2.yaml"
AGENT_LOG="$TMP/agent1.log" agent_up "$TMP/p1.yaml"
AGENT_LOG="$TMP/agent2.log" agent_up "$TMP/p2.yaml"
# one AGENT_PORT MESSAGE USER: one request; its ACK line.
one() { "$CLIENT" -a "127.0.0.1:$1" "$2" "user=s:$3"; }
# statuses AGENT_PORT N MESSAGE USER: N requests; their statuses.
statuses() {
	"$CLIENT" -a "127.0.0.1:$1" -n "$2" "$3" "user=s:$4" |
		field status | tr '\n' ' '
}
# retry AGENT_PORT MESSAGE USER: the Retry-After of one request (0: allowed).
retry() {
	one "$@" >"$TMP/r"
	v=$(field retry_after <"$TMP/r")
	echo "${v:-0}"
}

# ---- a ban holds for its period, counting down, then releases ------------
expect_eq "$(statuses "$AP1" 3 rl-request alice)" "0 0 429 " \
	"ban: the third request of a 2/s burst is the offence"
one "$AP1" rl-request alice >"$TMP/b1"
expect_eq "$(field status <"$TMP/b1")" 429 "ban: the next request is blocked"
ra1=$(field retry_after <"$TMP/b1")
[ "$ra1" -eq 3 ]; ok $? "ban: Retry-After is the block's 3 s ($ra1)"
sleep 1.2	# the rate alone would have let 2 more through by now
one "$AP2" rl-request alice >"$TMP/b2"
expect_eq "$(field status <"$TMP/b2")" 429 \
	"ban: the other agent blocks too, past the rate's own retry (the record is in Redis)"
ra2=$(field retry_after <"$TMP/b2")
[ "$ra2" -lt "$ra1" ] && [ "$ra2" -ge 1 ]
ok $? "ban: Retry-After counts down ($ra1 then $ra2)"
rec=$(rc "$RP" GET 'rl:{ban:u:alice}!b')
case "$rec" in *" 1") ok 0 "ban: the record sits beside the key, one offence ($rec)" ;;
	*) ok 1 "ban: the record sits beside the key, one offence (got '$rec')" ;; esac
sleep 2.1	# past the block's end
expect_eq "$(statuses "$AP1" 2 rl-request alice)" "0 0 " \
	"ban: released at the block's end, with the full burst"
expect_eq "$(statuses "$AP1" 1 rl-request bob)" "0 " \
	"ban: a neighbour was never blocked"

# ---- escalation: doubled per repeat, capped at block_max ----------------
# offend USER: one allowed request then the denied one; its Retry-After.
offend() {
	statuses "$AP1" 1 rl-esc "$1" >/dev/null
	retry "$AP1" rl-esc "$1"
}
r1=$(offend carol)
sleep 1.1
r2=$(offend carol)
sleep 2.1
r3=$(offend carol)
sleep 4.1
r4=$(offend carol)
expect_eq "$r1 $r2 $r3 $r4" "1 2 4 4" \
	"escalation: blocks of 1, 2, 4 s, then capped at block_max 4 s"
rec=$(rc "$RP" GET 'rl:{esc:e:carol}!b')
expect_eq "${rec#* }" 4 "escalation: four offences remembered"
# ---- forgotten past the quiet period (block_max after the block's end) --
sleep 4.1	# the block ends
sleep 4.2	# the quiet period ends
expect_eq "$(rc "$RP" EXISTS 'rl:{esc:e:carol}!b')" 0 \
	"escalation: the record expires with the quiet period"
expect_eq "$(offend carol)" 1 "escalation: forgotten, back to the base block of 1 s"

# ---- a blocked key costs no script call -----------------------------------
expect_eq "$(statuses "$AP1" 2 rl-sw dave)" "0 429 " \
	"sliding-window: the second request is the offence (block 30 s)"
calls0=$(script_calls "$RP")
expect_eq "$(statuses "$AP1" 200 rl-sw dave | tr ' ' '\n' | sort -u | tr '\n' ' ')" \
	"429 " "blocked: 200 more requests all denied"
expect_eq "$(( $(script_calls "$RP") - calls0 ))" 0 \
	"blocked: no script call for 200 requests of the blocked key (near-cache)"
ra=$(retry "$AP1" rl-sw dave)
[ "$ra" -ge 28 ] && [ "$ra" -le 30 ]
ok $? "blocked: the near-cache's Retry-After is the block's time left ($ra)"
calls0=$(script_calls "$RP")
expect_eq "$(statuses "$AP1" 3 rl-plain erin)" "0 429 429 " \
	"no block: a plain rule's denial"
[ $(( $(script_calls "$RP") - calls0 )) -ge 2 ]
ok $? "no block: a plain rule still asks Redis (its near-cache hold is short)"

# ---- key show prints the block ---------------------------------------------
"$AGENT" key show -f "$TMP/p1.yaml" sw user=dave >"$TMP/show" 2>&1
ok $? "key show sw user=dave"
grep -q '^block: *blocked for [0-9.]*s more (offence 1;' "$TMP/show"
ok $? "key show: blocked, offence 1 ($(grep '^block' "$TMP/show"))"
grep -q '^retry_after: *2[0-9]\.[0-9]*s$' "$TMP/show"
ok $? "key show: retry_after is the block's ($(grep '^retry_after' "$TMP/show"))"
"$AGENT" key show --json -f "$TMP/p1.yaml" sw user=dave >"$TMP/showj" 2>&1
grep -q '"block":{"blocked":true,"left_ms":[0-9]*,"offences":1' "$TMP/showj"
ok $? "key show --json: the block object ($(grep -o '"block":{[^}]*}' "$TMP/showj"))"
"$AGENT" key show -f "$TMP/p1.yaml" plain user=erin >"$TMP/show2" 2>&1
! grep -q '^block:' "$TMP/show2"; ok $? "key show: no block line for a rule without block"
calls0=$(script_calls "$RP")
"$AGENT" key show -f "$TMP/p1.yaml" esc user=frank >/dev/null 2>&1
statuses "$AP1" 1 rl-esc frank >/dev/null
"$AGENT" key show -f "$TMP/p1.yaml" esc user=frank >"$TMP/show3" 2>&1
expect_eq "$(rc "$RP" EXISTS 'rl:{esc:e:frank}!b')" 0 \
	"key show never offends (its peek at a key at its limit starts no block)"

# ---- reset clears the block on every agent, near-caches included ----------
one "$AP2" rl-sw dave >/dev/null	# agent 2 near-caches the block too
"$AGENT" key reset -f "$TMP/p1.yaml" sw user=dave >"$TMP/reset" 2>&1
ok $? "key reset sw user=dave ($(cat "$TMP/reset"))"
expect_eq "$(rc "$RP" EXISTS 'rl:{sw:s:dave}!b')" 0 "reset: the block record is gone"
t0=$(now_ms)
pass_both() {
	[ "$(statuses "$AP1" 1 rl-sw dave)" = "0 " ] &&
		[ "$(statuses "$AP2" 1 rl-sw dave)" = "429 " ]
}
until_ok 20 pass_both
ok $? "reset: agent 1 passes the key again (and agent 2, sharing its count, denies the second)"
[ $(( $(now_ms) - t0 )) -lt 1500 ]
ok $? "reset: seen within the poll interval ($(( $(now_ms) - t0 )) ms)"
"$AGENT" key reset -f "$TMP/p1.yaml" sw user=dave >/dev/null 2>&1
sleep 1.2
expect_eq "$(statuses "$AP2" 1 rl-sw dave)" "0 " \
	"reset: agent 2's near-cached block was dropped too"

# ---- the metric -------------------------------------------------------------
n=$(metric "$MP" 'spoa_rl_blocked_total{rule="sw"}')
[ "$n" -ge 200 ]; ok $? "spoa_rl_blocked_total{rule=\"sw\"} counts near-cached blocks ($n)"
expect_eq "$(metric "$MP" 'spoa_rl_blocked_total{rule="plain"}')" 0 \
	"spoa_rl_blocked_total{rule=\"plain\"}: 0 for a rule without block"

# ---- the local tier keeps its own box (store: local) -------------------------
calls0=$(script_calls "$RP")
expect_eq "$(statuses "$AP1" 4 rl-loc gina)" "0 0 429 429 " \
	"store: local: the third request is the offence, the fourth blocked"
expect_eq "$(retry "$AP1" rl-loc gina)" 2 "store: local: Retry-After is the block's 2 s"
expect_eq "$(( $(script_calls "$RP") - calls0 ))" 0 "store: local: no script call"
sleep 1.1
expect_eq "$(statuses "$AP1" 1 rl-loc gina)" "429 " \
	"store: local: still blocked after 1.1 s (the rate alone would pass it)"
sleep 1.1
expect_eq "$(statuses "$AP1" 2 rl-loc gina)" "0 0 " \
	"store: local: released at the block's end, with the full burst"

# ---- -c refuses bad values ----------------------------------------------------
bad() { # YAML-RULE-TAIL WANT
	{
		policy_top "$(port 5)" "redis://127.0.0.1:$RP/0" 100ms 1
		echo "processing_timeout: 1s"
		echo "rules:"
		echo "  - { name: r, message: m, key: \"k:{k}\", $1 }"
	} >"$TMP/bad.yaml"
	"$AGENT" -c -f "$TMP/bad.yaml" >"$TMP/bad.out" 2>&1
	st=$?
	[ "$st" -eq 1 ] && [ "$(wc -l <"$TMP/bad.out")" -eq 1 ] &&
		grep -q "$2" "$TMP/bad.out"
	ok $? "-c refuses $1 with one line ($(head -n 1 "$TMP/bad.out"))"
}
bad "rate: 1/s, block: 10m, block_max: 5m" "block_max: must be at least block (600s)"
bad "rate: 1/s, block_max: 1h" "block_max: needs block"
bad "algorithm: concurrency, limit: 2, release: d, block: 1m" "block: does not apply to concurrency"
bad "rate: 1/s, block: 0s" "block: must be between"
bad "rate: 1/s, block: soon" "rules\[0\].block: "
{
	policy_top "$(port 5)" "redis://127.0.0.1:$RP/0" 100ms 1
	echo "processing_timeout: 1s"
	echo "rules:"
	echo "  - { name: r, message: m, key: \"k:{k}\", rate: 1/s, block: 10m, block_max: 24h, fail: local }"
} >"$TMP/good.yaml"
"$AGENT" -c -f "$TMP/good.yaml" >"$TMP/good.out" 2>&1
ok $? "-c accepts block: 10m, block_max: 24h"
finish
