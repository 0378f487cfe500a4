#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Drains and reloads under load, through the shipped haproxy.cfg with a
# pool of two agents (RL_AGENT, RL_AGENT2) and HAProxy in master-worker
# mode (-W, as packaged HAProxy 3.x runs), wrk paced at 16 keep-alive
# connections and /slow requests (1 s each) in flight:
#   1. agent 2 taken out the way docs/OPERATING.md says: `set server
#      be_spoa_rl/rl2 state drain` on HAProxy's CLI, then SIGTERM. It exits
#      0 within its drain deadline and no NOTIFY goes unanswered: no
#      request gets txn.rl.error but the DISCONNECT race SPOP cannot rule
#      out (only_drain_race), no SPOE error line.
#   3. a bare SIGTERM (rl2 left UP until the health check fails): the
#      connections HAProxy opens to it meanwhile are refused and, thanks to
#      `option redispatch 1` in be_spoa_rl, retried at once on agent 1:
#      no error either but that race (without it, every stream sent to rl2 in that window
#      waited out timeout processing: 141 on 3.2.0 in one run). On 3.1+
#      the streams rl2 refuses in the instant the check marks it DOWN
#      wait a turn-around of timeout connect before their retry on rl1
#      (one agent left): be_spoa_rl's 25ms keeps that inside timeout
#      processing (with 1s: up to 6 errors, in 2 runs of 4 on 3.2.0).
#   2. HAProxy reloaded (SIGUSR2 to the master): a new worker takes over,
#      the old one finishes its /slow requests and exits, every request is
#      answered 200 without an SPOE error.
# HAProxy's log lines of the requests carry rl_error. HAProxy drops one
# now and then (show info: DroppedLogs) when two of its threads contend
# for the stderr fd on busy cores; phase 1 counts such a request as a
# possible race error, and wrk's worst latency under timeout processing
# shows that none of them waited out an unanswered NOTIFY.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent
command -v wrk >/dev/null || { echo "not ok - wrk not installed (make deps)"; FAIL=1; finish; }

AGENT2_PORT=$(port 5)
M2=$(port 6)
export RL_AGENT2="127.0.0.1:$AGENT2_PORT"
write_policy 1000000 1000000/s 50ms

state() {	# NAME: srv_op_state of be_spoa_rl/NAME (0 DOWN, 2 UP)
	cli "show servers state be_spoa_rl" |
		awk -v s="$1" '$2 == "be_spoa_rl" && $4 == s { print $6 }'
}
up2() { [ "$(state rl1)" = 2 ] && [ "$(state rl2)" = 2 ]; }
down2() { [ "$(state rl2)" = 0 ]; }
# rl_errors: request log lines with txn.rl.error set, and SPOE error lines.
rl_errors() { grep -c -E 'rl_error=[1-9]|SPOE: .*st=[1-9]' "$TMP/haproxy.log"; }
# only_drain_race E0 WHAT [DROPPED]: since the E0th error line, no error
# but the one SPOP cannot rule out (docs/OPERATING.md, "Upgrades"): a
# NOTIFY HAProxy wrote in the instant before it read the agent's normal
# DISCONNECT fails, 256 on 2.6 and 257 on 3.x, and is never resent. Each
# such instant loses at most what was in flight then, and wrk keeps 16
# requests in flight, so more than 16 means the agent closed connections
# that were not quiet; a timeout (1) means it left a NOTIFY unanswered.
# DROPPED log lines count as errors of the race.
only_drain_race() {
	local l n bad
	l=$(grep -E 'rl_error=[1-9]|SPOE: .*st=[1-9]' "$TMP/haproxy.log" | tail -n +$(($1 + 1)))
	n=$(($(printf '%s' "$l" | grep -c 'rl_error=') + ${3:-0}))
	bad=$(printf '%s' "$l" | grep -v -E '(rl_error|st)=25[67]( |$)' | head -3)
	printf '%s\n' "$l" | sed -n 's/.*rl_error=\([0-9]*\).*/\1/p' | sort | uniq -c |
		awk -v w="$2" '{ printf "# %s: rl_error=%s x%s\n", w, $2, $1 }'
	[ -z "$bad" ] && [ "$n" -le 16 ]
	ok $? "$2: no NOTIFY unanswered, no error but the DISCONNECT race ($n, <= 16)"
	[ -z "$bad" ] || printf '%s\n' "$bad" | sed 's/^/#   /'
}
# workers: haproxy worker processes of the master $HAPROXY_PID.
workers() { pgrep -P "$HAPROXY_PID" | tr '\n' ' '; }
slow() {	# N: N /slow requests in the background (pids in SLOW), codes
	SLOW=""	# in $TMP/slow
	for i in $(seq "$1"); do
		curl -s -o /dev/null -w '%{http_code}\n' --max-time 5 \
			-H 'X-Tenant: slow' "$URL/slow" >>"$TMP/slow" &
		SLOW="$SLOW $!"
	done
}

start_redis "$REDIS_PORT"
stack_agent "$POLICY"
"$AGENT" -f "$POLICY" -l "127.0.0.1:$AGENT2_PORT" -m "127.0.0.1:$M2" \
	-r "redis://127.0.0.1:$REDIS_PORT/0" >>"$TMP/agent2.log" 2>&1 &
A2=$!
PIDS="$PIDS $A2"
wait_port "$AGENT_PORT" 10 && wait_port "$AGENT2_PORT" 10
ok $? "two agents listening"
"$HAPROXY" -W -db -f "$HAP_CFG" >>"$TMP/haproxy.log" 2>&1 &
HAPROXY_PID=$!
PIDS="$PIDS $HAPROXY_PID"
wait_port "$HAP_PORT" 10 && wait_port "$STATS_PORT" 5 && until_ok 100 up2
ok $? "haproxy (master-worker) up, rl1 and rl2 UP"

wrk_count_lua 20 >"$TMP/count.lua"

# ---- 1. agent 2 drained ---------------------------------------------------
wrk -t 1 -c 16 -d 8s --timeout 2s -s "$TMP/count.lua" "$URL/wrk" >"$TMP/wrk1.out" 2>&1 &
WRK=$!
PIDS="$PIDS $WRK"
sleep 2
f0=$(metric "$M2" spoa_rl_spop_frames_total)
[ "$f0" -gt 0 ]; ok $? "agent 2 takes its share ($f0 frames)"
cli "set server be_spoa_rl/rl2 state drain" >/dev/null
until_ok 20 eval '[ "$(state rl2)" = 2 ] && cli "show servers state be_spoa_rl" |
	awk '"'"'$4 == "rl2" && $7 == 8 { f = 1 } END { exit !f }'"'"''
ok $? "rl2 in state drain (srv_admin_state 8)"
slow 4
sleep 0.5
e0=$(rl_errors)
t0=$(now_ms)
kill -TERM "$A2"
wait "$A2"
rc=$?
ms=$(($(now_ms) - t0))
expect_eq "$rc" 0 "agent 2 drains and exits 0 on SIGTERM"
[ "$ms" -le 7000 ]; ok $? "within its drain deadline (5 s) and slack ($ms ms)"
until_ok 50 down2; ok $? "HAProxy marks rl2 DOWN"
wait "$WRK"
wait $SLOW
grep '^wrk' "$TMP/wrk1.out" | sed 's/^/# drain: /'
expect_eq "$(sed -n 's/^wrk .*cother=\([0-9]*\).*/\1/p' "$TMP/wrk1.out")" 0 "drain: wrk got 200 only"
expect_eq "$(grep -c 200 "$TMP/slow")" 4 "drain: the /slow requests in flight answer 200"
dropped=$(dropped_logs "$STATS_PORT")
maxlat=$(sed -n 's/^wrk .*maxlat_ms=\([0-9]*\).*/\1/p' "$TMP/wrk1.out")
[ "$dropped" -le 4 ] && { [ "$dropped" = 0 ] || [ "${maxlat:-999}" -lt 100 ]; }
ok $? "drain: HAProxy dropped few log lines ($dropped, <= 4), none a request that waited out timeout processing (wrk's worst ${maxlat}ms < 100ms)"
n=$(grep -c ' rl_status=' "$TMP/haproxy.log")
[ "$n" -gt 100 ]; ok $? "drain: $n requests logged"
only_drain_race "$e0" drain "$dropped"

# ---- 2. HAProxy reloaded (master-worker) ------------------------------------
"$AGENT" -f "$POLICY" -l "127.0.0.1:$AGENT2_PORT" -m "127.0.0.1:$M2" \
	-r "redis://127.0.0.1:$REDIS_PORT/0" >>"$TMP/agent2.log" 2>&1 &
PIDS="$PIDS $!"
until_ok 100 up2; ok $? "agent 2 restarted, UP"
: >"$TMP/slow"
old=$(workers)
[ -n "$old" ]; ok $? "one worker before the reload ($old)"
wrk -t 1 -c 16 -d 6s --timeout 2s -s "$TMP/count.lua" "$URL/wrk" >"$TMP/wrk2.out" 2>&1 &
WRK=$!
PIDS="$PIDS $WRK"
sleep 1.5
slow 4
sleep 0.2
e0=$(rl_errors)
kill -USR2 "$HAPROXY_PID"
gone=1
for i in $(seq 100); do
	w=$(workers)
	[ -n "$w" ] && [ "$w" != "$old" ] && ! echo " $w " | grep -q " ${old% } " &&
		{ gone=0; break; }
	sleep 0.1
done
ok $gone "the reload: a new worker ($(workers)) replaced the old ($old), which exited"
wait "$WRK"
wait $SLOW
grep '^wrk' "$TMP/wrk2.out" | sed 's/^/# reload: /'
expect_eq "$(sed -n 's/^wrk .*cother=\([0-9]*\).*/\1/p' "$TMP/wrk2.out")" 0 "reload: wrk got 200 only"
# (read errors are keep-alive connections the old worker closed as a
# request came: HTTP's own race, not the SPOE's)
c=$(sed -n 's/^wrk .*connect=\([0-9]*\) .*timeout=\([0-9]*\).*/\1\2/p' "$TMP/wrk2.out")
expect_eq "$c" 00 "reload: no wrk connect error or timeout"
expect_eq "$(grep -c 200 "$TMP/slow")" 4 "reload: the /slow requests in flight answer 200"
expect_eq "$(($(rl_errors) - e0))" 0 "reload: no txn.rl.error, no SPOE error"
until_ok 50 up2; ok $? "the new worker sees rl1 and rl2 UP"

# ---- 3. a bare SIGTERM (rl2 left UP) ------------------------------------------
A2=$(pgrep -f -- "-l 127.0.0.1:$AGENT2_PORT " | head -1)
wrk -t 1 -c 16 -d 5s --timeout 2s -s "$TMP/count.lua" "$URL/wrk" >"$TMP/wrk3.out" 2>&1 &
WRK=$!
PIDS="$PIDS $WRK"
sleep 1.5
e0=$(rl_errors)
kill -TERM "$A2"
wait "$WRK"
until_ok 50 down2
only_drain_race "$e0" "bare SIGTERM, rl2 UP until the check fails"

[ -n "${KEEP_TMP:-}" ] && cp -r "$TMP" "$KEEP_TMP"
finish
