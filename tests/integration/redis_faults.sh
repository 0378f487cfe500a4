# SPDX-License-Identifier: Apache-2.0
# Redis faults seen from the agent, driven over SPOP against private
# redis-servers (issue 5): the circuit breaker (opens after BREAKER_FAILS
# stalled calls, refuses work for BREAKER_COOLDOWN with nothing sent to
# Redis, probes, closes), reconnect backoff (capped exponential, back
# within the cap), AUTH and ACL users from the policy, the URL and the
# environment (secrets never logged), fail: local under an outage (the
# limit divided by pool_size, rounded down), and a per-request error
# reply (WRONGTYPE) that fails its request without tripping the breaker.
# Every agent runs one worker, so one store and one breaker are observed.
. "$(dirname "$0")/../lib.sh"


# log_ms FILE MSG [FROM_LINE]: the time of day, in ms, of each MSG line
# of FILE from line FROM_LINE on (logfmt ts=...THH:MM:SS.mmmZ).
log_ms() {
	tail -n "+${3:-1}" "$1" | grep " msg=$2 " |
		sed -n 's/^ts=[^T]*T\([0-9]*\):\([0-9]*\):\([0-9]*\)\.\([0-9]*\)Z .*/\1 \2 \3 \4/p' |
		awk '{ print (($1 * 60 + $2) * 60 + $3) * 1000 + $4 }'
}

# wait_log FILE MSG FROM_LINE SECONDS: until a MSG line appears there.
wait_log() {
	i=0
	while [ $i -lt $(($4 * 20)) ]; do
		tail -n "+$3" "$1" | grep -q " msg=$2 " && return 0
		sleep 0.05; i=$((i + 1))
	done
	return 1
}

# verdict OUTPUT: "status/degraded" of each ACK, space-separated.
verdict() {
	echo "$1" | grep '^ack' | while read -r l; do
		printf '%s/%s ' "$(echo "$l" | field status)" "$(echo "$l" | field degraded)"
	done
}

# run_agent NAME PORT REDIS RULES [ARGS...]: an agent with one worker on
# PORT, `redis: REDIS`, the rules RULES (YAML list lines) and the top-level
# lines in $TOP, logging to agent-NAME.log; ARGS go to the agent.
run_agent() {
	printf 'listen: 127.0.0.1:%s\nworkers: 1\nredis: %s\n%srules:\n%s\n' \
		"$2" "$3" "${TOP:-}" "$4" >"$TMP/$1.yaml"
	alog="$TMP/agent-$1.log"; apol="$TMP/$1.yaml"; shift 4
	AGENT_LOG=$alog start_agent "$apol" "$@"
}

# redis_and_agent NAME N TIMEOUT RULE: a Redis on port N (RP), and
# run_agent NAME on port N+1 (AP) with its metrics on N+2 (MP), RULE and
# that Redis with redis.timeout TIMEOUT; returns once both listen.
redis_and_agent() {
	RP=$(port "$2"); AP=$(port $(($2 + 1))); MP=$(port $(($2 + 2)))
	start_redis "$RP"
	run_agent "$1" "$AP" "{ url: \"redis://127.0.0.1:$RP/0\", timeout: $3 }" \
		"$4" -m "127.0.0.1:$MP"
	wait_port "$AP" && wait_port "$MP"
}

# counts OUTPUT: "N*status/degraded" for each run of equal verdicts, in order.
counts() { verdict "$1" | tr ' ' '\n' | uniq -c | awk 'NF { printf "%s*%s ", $1, $2 }'; }

# timed ARGS...: spop-client ARGS against $AP; its output in $out, its
# wall time in $ms.
timed() {
	t0=$(now_ms)
	out=$(c "$@")
	ms=$(($(now_ms) - t0))
}

# ---- 1. circuit breaker ------------------------------------------------
redis_and_agent breaker 1 50ms \
	'  - { name: t, message: rl-request, key: "t:{tenant}", rate: 1000/s, burst: 1000, fail: open }'
LOG1="$TMP/agent-breaker.log"
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@"; }
expect_eq "$(verdict "$(c rl-request tenant=s:warm)")" "0/0 " "breaker: a decision from Redis before the fault"
expect_eq "$(metric "$MP" spoa_rl_redis_circuit_open)" 0 "breaker: circuit_open is 0 while Redis answers"
before=$(script_calls "$RP")
RPID=$(eval echo "\$REDIS_PID_$RP")
kill -STOP "$RPID"
# Each request waits its 50 ms deadline; once Redis has been silent for
# STORE_STALL_S (1 s) each timeout counts, and the fifth opens the breaker.
sent=0
while [ $sent -lt 80 ]; do
	c rl-request tenant=s:stall$sent >/dev/null
	sent=$((sent + 1))
	grep -q ' msg=redis_breaker_open ' "$LOG1" && break
done
grep -q " msg=redis_breaker_open host=127.0.0.1 port=$RP cooldown_s=0.5" "$LOG1"
ok $? "breaker: redis_breaker_open is logged with its cooldown ($sent requests sent)"
expect_eq "$(metric "$MP" spoa_rl_redis_circuit_open)" 1 "breaker: circuit_open reaches 1"
timed -n 30 rl-request tenant=s:cool
expect_eq "$(counts "$out")" "30*0/1 " \
	"breaker: during the cooldown 30 requests get fail: open at once, degraded=1"
[ "$ms" -lt 250 ]; ok $? "breaker: without waiting for the 50 ms deadline ($ms ms for 30)"
sleep 0.6			# past the cooldown: the next request probes
timed rl-request tenant=s:probe
expect_eq "$(verdict "$out")" "0/1 " "breaker: the probe to a stopped Redis times out to the fail mode"
[ "$ms" -ge 45 ]; ok $? "breaker: the probe was sent, it waited for its deadline ($ms ms)"
timed -n 10 rl-request tenant=s:cool2
expect_eq "$(counts "$out")" "10*0/1 " \
	"breaker: the failed probe reopens it: 10 more at once"
[ "$ms" -lt 200 ]; ok $? "breaker: reopened, nothing waits ($ms ms for 10)"
# Half-open again, 10 clients at once: one batch probes and waits its
# deadline; the others are answered at once instead of waiting too. The
# proof is Redis' call count below (two probes in all): the clients' own
# times say little, 10 processes starting at once (under ASan, say) take
# longer than the 50 ms deadline.
sleep 0.6
hp=""
for k in $(seq 10); do
	( t0=$(now_ms); o=$(c rl-request tenant=s:half$k)
	  echo "$(($(now_ms) - t0)) $(verdict "$o")" ) >"$TMP/half$k" &
	hp="$hp $!"
done
wait $hp
expect_eq "$(cat "$TMP"/half* | awk '{ print $2 }' | sort -u | tr '\n' ' ')" "0/1 " \
	"breaker: half-open, 10 clients at once: all get the fail mode"
line=$(wc -l <"$LOG1")
kill -CONT "$RPID"
wait_log "$LOG1" redis_breaker_closed "$line" 3
ok $? "breaker: the late replies after SIGCONT close it (redis_breaker_closed)"
expect_eq "$(($(script_calls "$RP") - before))" "$((sent + 2))" \
	"breaker: Redis executed the $sent calls sent before it opened and the two probes, none of the cooldowns' 40"
expect_eq "$(metric "$MP" spoa_rl_redis_circuit_open)" 0 "breaker: circuit_open is back to 0"
expect_eq "$(verdict "$(c rl-request tenant=s:after)")" "0/0 " "breaker: decisions come from Redis again"

# ---- 2. reconnect backoff -------------------------------------------------
line=$(wc -l <"$LOG1")
kill -9 "$RPID"; wait "$RPID" 2>/dev/null
wait_log "$LOG1" redis_disconnected "$line" 2
ok $? "backoff: the agent sees Redis die"
sleep 4.2
log_ms "$LOG1" redis_connect_failed "$line" >"$TMP/attempts"
n=$(wc -l <"$TMP/attempts")
awk 'NR > 1 { print $1 - p } { p = $1 }' "$TMP/attempts" >"$TMP/gaps"
echo "# reconnect attempts in 4.2 s: $n; gaps (ms): $(xargs <"$TMP/gaps")"
# 50 ms doubling to a 1 s cap, each delay jittered over its upper half:
# 25-50, 50-100, 100-200, 200-400, 400-800, then 500-1000 ms: 7 to 12
# attempts in 4.2 s (at 3.55 s the 7th at the latest).
[ "$n" -ge 7 ] && [ "$n" -le 13 ]; ok $? "backoff: 7 to 13 attempts in 4.2 s, not one per 50 ms ($n)"
expect_eq "$(awk '$1 > 1100' "$TMP/gaps" | wc -l)" 0 "backoff: no gap above the 1 s cap (+100 ms)"
[ "$(head -n 1 "$TMP/gaps")" -le 150 ]; ok $? "backoff: the first retries are quick ($(head -n 1 "$TMP/gaps") ms)"
expect_eq "$(tail -n 2 "$TMP/gaps" | awk '$1 >= 450' | wc -l)" 2 \
	"backoff: the last two gaps are at the cap, 500-1000 ms"
awk 'NR > 1 && $1 < p / 2 - 30 { bad = 1 } { p = ($1 > p ? $1 : p) } END { exit bad }' "$TMP/gaps"
ok $? "backoff: no gap falls below half the largest one before it (the delay only grows)"
line=$(wc -l <"$LOG1")
t0=$(now_ms)
start_redis "$RP"
wait_log "$LOG1" redis_connected "$line" 3
ok $? "backoff: the agent reconnects once Redis is back"
ms=$(( $(log_ms "$LOG1" redis_connected "$line" | head -n 1) - t0 % 86400000 ))
[ "$ms" -le 1300 ]; ok $? "backoff: within the 1 s cap of Redis returning ($ms ms)"
expect_eq "$(verdict "$(c rl-request tenant=s:back)")" "0/0 " "backoff: decisions from Redis again"
kill "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null

# ---- 3. AUTH and ACL users --------------------------------------------------
# One Redis with requirepass, one with an ACL user (the default user has
# another password). Each agent serves its own port and logs to its own
# file; every secret is then looked for in every log.
PW_RP=$(port 4); ACL_RP=$(port 5)
PASS_A=pw-Requirepass-7f3a91; PASS_DEF=pw-Default-0c55e2; PASS_ACL=pw-AclUser-b8d41e
WRONG=pw-Wrong-5e19aa
start_redis "$PW_RP" --requirepass "$PASS_A"
start_redis "$ACL_RP" --requirepass "$PASS_DEF"
redis-cli -p "$ACL_RP" -a "$PASS_DEF" --no-auth-warning \
	ACL SETUSER rl on ">$PASS_ACL" '~rl:*' '+@all' >/dev/null
ok $? "auth: ACL user rl created"
# auth_agent NAME PORT REDIS: one rule, fail: closed. 10/min: a request
# keeps its key 6 s, so the keys are still there when they are counted
# below, however slow the machine (at 10/s they lived 100 ms each).
auth_agent() {
	run_agent "$1" "$2" "$3" \
		'  - { name: a, message: rl-request, key: "a:{tenant}", rate: 10/min, burst: 10, fail: closed }'
}
R=127.0.0.1
export RL_TEST_PASS=$PASS_A RL_TEST_ACL_USER=rl RL_TEST_ACL_PASS=$PASS_ACL RL_TEST_WRONG=$WRONG
auth_agent pw-file "$(port 6)" "{ url: \"redis://$R:$PW_RP/0\", password: \"$PASS_A\" }"
auth_agent pw-env "$(port 7)" "{ url: \"redis://$R:$PW_RP/0\", password_env: RL_TEST_PASS }"
auth_agent acl-file "$(port 8)" "{ url: \"redis://$R:$ACL_RP/0\", username: rl, password: \"$PASS_ACL\" }"
auth_agent acl-env "$(port 9)" "{ url: \"redis://$R:$ACL_RP/0\", username_env: RL_TEST_ACL_USER, password_env: RL_TEST_ACL_PASS }"
auth_agent acl-url "$(port 10)" "{ url: \"redis://rl:$PASS_ACL@$R:$ACL_RP/0\" }"
auth_agent pw-wrong "$(port 11)" "{ url: \"redis://$R:$PW_RP/0\", password: \"$WRONG\" }"
auth_agent acl-wrong "$(port 12)" "{ url: \"redis://$R:$ACL_RP/0\", username: rl, password_env: RL_TEST_WRONG }"
unset RL_TEST_PASS RL_TEST_ACL_USER RL_TEST_ACL_PASS RL_TEST_WRONG
for i in 6 7 8 9 10 11 12; do wait_port "$(port $i)"; done
n=0
for a in pw-file:6 pw-env:7 acl-file:8 acl-env:9 acl-url:10; do
	n=$((n + 1))
	out=$("$CLIENT" -a "127.0.0.1:$(port ${a#*:})" -n 2 rl-request tenant=s:auth$n)
	expect_eq "$(verdict "$out")" "0/0 0/0 " "auth: ${a%:*}: decided by Redis (degraded=0)"
done
expect_eq "$(redis-cli -p "$PW_RP" -a "$PASS_A" --no-auth-warning --scan --pattern 'rl:*' | wc -l)" 2 \
	"auth: the requirepass Redis holds the two agents' keys"
expect_eq "$(redis-cli -p "$ACL_RP" --user rl --pass "$PASS_ACL" --no-auth-warning --scan --pattern 'rl:*' | wc -l)" 3 \
	"auth: the ACL user wrote the three agents' keys"
for a in pw-wrong:11 acl-wrong:12; do
	out=$("$CLIENT" -a "127.0.0.1:$(port ${a#*:})" -n 2 rl-request tenant=s:wrong)
	expect_eq "$(verdict "$out")" "503/1 503/1 " "auth: ${a%:*}: a wrong password gives fail: closed, degraded=1"
	grep -q ' msg=redis_setup command=AUTH error="WRONGPASS' "$TMP/agent-${a%:*}.log"
	ok $? "auth: ${a%:*}: the refused AUTH is logged (redis_setup command=AUTH ... WRONGPASS)"
done
for s in "$PASS_A" "$PASS_DEF" "$PASS_ACL" "$WRONG"; do
	expect_eq "$(cat "$TMP"/agent-*.log | grep -c -F -e "$s")" 0 "auth: no log line holds the secret ${s%-*}-..."
done

# A refused AUTH drops the link (Redis 7 closes an unauthenticated client
# that sends SCRIPT LOAD): the reconnects keep to the backoff, they do not
# loop at connect speed.
line=$(wc -l <"$TMP/agent-pw-wrong.log")
sleep 1.5
n=$(tail -n "+$line" "$TMP/agent-pw-wrong.log" | grep -c ' msg=redis_connected ')
[ "$n" -le 5 ]; ok $? "auth: a refused AUTH is retried at the backoff pace ($n connects in 1.5 s)"

# ---- 4. fail: local under an outage ----------------------------------------
# Nothing listens on Redis's port. pool_size 3: each rule's limit of 100
# becomes floor(100 / 3) = 33 in process, so 3 agents never pass 100.
FL_AP=$(port 13)
TOP="pool_size: 3
" run_agent local "$FL_AP" "{ url: \"redis://127.0.0.1:$(port 14)/0\", timeout: 50ms }" \
'  - { name: fw, message: rl-fw, key: "fw:{tenant}", algorithm: fixed-window, limit: 100, window: 1h, fail: local }
  - { name: g, message: rl-gcra, key: "g:{tenant}", algorithm: gcra, rate: 100/h, burst: 100, fail: local }
  - { name: small, message: rl-small, key: "s:{tenant}", algorithm: fixed-window, limit: 2, window: 1h, fail: local }'
wait_port "$FL_AP"
for m in rl-fw rl-gcra; do
	out=$("$CLIENT" -a "127.0.0.1:$FL_AP" -n 40 $m tenant=s:acme)
	expect_eq "$(counts "$out")" "33*0/1 7*429/1 " \
		"local: $m: 100 over pool_size 3 allows 33 in process, then 429, all degraded=1"
done
# The ACK states the share it enforces: limit 33 and q=33, which
# remaining counts down from (they said the rule's 100).
out=$("$CLIENT" -a "127.0.0.1:$FL_AP" rl-fw tenant=s:hdr)
expect_eq "$(echo "$out" | field limit) $(echo "$out" | field remaining)" "33 32" \
	"local: the ACK's limit is the share, remaining counts down from it"
echo "$out" | grep -q 'ratelimit_policy="fw";q=33;w=3600'
ok $? "local: and RateLimit-Policy states q=33 ($(echo "$out" | field ratelimit_policy))"
out=$("$CLIENT" -a "127.0.0.1:$FL_AP" -n 3 rl-small tenant=s:acme)
expect_eq "$(counts "$out")" "1*0/1 2*429/1 " "local: a limit under pool_size still allows 1, not 0"
out=$("$CLIENT" -a "127.0.0.1:$FL_AP" rl-fw tenant=s:other)
expect_eq "$(verdict "$out")" "0/1 " "local: another key has its own count"
grep -q ' msg=fail_mode rule=fw mode=local reason=redis_down ' "$TMP/agent-local.log"
ok $? "local: the fallback is logged (fail_mode mode=local reason=redis_down)"
# The agent's workers share one local tier, so the share is the agent's:
# pool_size 2 and -w 2 make a burst of 10 into 5 for the agent, all 5
# admitted whichever worker each connection lands on (each worker kept its
# own table, with floor(10 / 4) = 2: the agent admitted 2 to 4). Twenty
# connections of one request each, four at a time, reach both workers
# (each logs its own fail_mode line, worker=N).
FL2_AP=$(port 30)
TOP="pool_size: 2
" run_agent local2 "$FL2_AP" "{ url: \"redis://127.0.0.1:$(port 14)/0\", timeout: 50ms }" \
'  - { name: fw, message: rl-fw, key: "fw:{tenant}", algorithm: fixed-window, limit: 100, window: 1h, fail: local }
  - { name: gc, message: rl-gcra, key: "gc:{tenant}", algorithm: gcra, rate: 10/h, burst: 10, fail: local }' -w 2
wait_port "$FL2_AP"
for i in 1 2 3 4 5; do
	pids=
	for j in 1 2 3 4; do
		"$CLIENT" -a "127.0.0.1:$FL2_AP" rl-gcra tenant=s:acme >"$TMP/w2-$i-$j" &
		pids="$pids $!"
	done
	wait $pids
done
out=$(cat "$TMP"/w2-*)
expect_eq "$(echo "$out" | grep -c ' status=0 ')/$(echo "$out" | grep -c ' status=429 ')" "5/15" \
	"local: with 2 workers, burst 10 over pool_size 2 admits exactly the agent's 5 over 20 connections"
expect_eq "$(echo "$out" | field limit | sort -u | tr '\n' ' ')" "5 " \
	"local: and every ACK states that share (limit 5)"
expect_eq "$(grep ' msg=fail_mode rule=gc ' "$TMP/agent-local2.log" | field worker | sort -u | tr '\n' ' ')" "0 1 " \
	"local: the 20 connections reached both workers"
out=$("$CLIENT" -a "127.0.0.1:$FL2_AP" -n 60 rl-fw tenant=s:acme)
expect_eq "$(counts "$out")" "50*0/1 10*429/1 " \
	"local: with 2 workers, 100 over pool_size 2 is 50 for the agent, so the pool stays within 100"

# ---- 5. a key of another type ---------------------------------------------
# The rule key of one tenant holds a list, as when a reload changed a
# rule's algorithm under the same name (a zset left by sliding-log read by
# fixed-window...). The script drops what it cannot read and starts the key
# fresh, as the local tier does: no WRONGTYPE, no fail mode for the batch,
# no breaker, and the other keys go on.
TOP="processing_timeout: 1s
" redis_and_agent wrongtype 15 100ms \
	'  - { name: w, message: rl-request, key: "w:{tenant}", algorithm: fixed-window, limit: 100, window: 1h, fail: closed }
  - { name: z, message: rl-log, key: "z:{tenant}", algorithm: sliding-log, limit: 3, window: 1h, fail: closed }'
LOG5="$TMP/agent-wrongtype.log"
expect_eq "$(verdict "$(c rl-request tenant=s:good)")" "0/0 " "wrongtype: a good key is decided by Redis"
expect_eq "$(redis-cli -p "$RP" exists 'rl:{w:w:good}')" 1 "wrongtype: its key is rl:{w:w:good}"
redis-cli -p "$RP" lpush 'rl:{w:w:bad}' x >/dev/null
out=$(c -n 12 rl-request tenant=s:bad)
expect_eq "$(counts "$out")" "12*0/0 " "wrongtype: requests on a key holding a list are decided by Redis, not degraded"
expect_eq "$(redis-cli -p "$RP" type 'rl:{w:w:bad}')/$(redis-cli -p "$RP" hvals 'rl:{w:w:bad}')" "hash/12" \
	"wrongtype: the list was replaced by the window counter, which counts the 12"
redis-cli -p "$RP" hset 'rl:{z:z:acme}' f 1 >/dev/null
out=$(c -n 4 rl-log tenant=s:acme)
expect_eq "$(counts "$out")" "3*0/0 1*429/0 " "wrongtype: sliding-log over a hash starts fresh: 3 of limit 3, then 429"
expect_eq "$(redis-cli -p "$RP" type 'rl:{z:z:acme}')" zset "wrongtype: the hash was replaced by the log"
! grep -q ' msg=redis_error ' "$LOG5"; ok $? "wrongtype: no redis_error logged"
expect_eq "$(metric "$MP" spoa_rl_redis_circuit_open)" 0 "wrongtype: the breaker stays closed"
out=$(c -n 3 rl-request tenant=s:good)
expect_eq "$(counts "$out")" "3*0/0 " "wrongtype: the good key is still decided by Redis"

finish
