#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# /metrics and /healthz after real traffic through the shipped haproxy.cfg
# (issue 7, "Tests that must exist and pass"): the metrics server comes
# from the policy's metrics.listen (no -m); 5 allowed and 7 denied
# requests of one tenant show up as exactly 5 and 7 in
# spoa_rl_decisions_total; HAProxy's connections are counted and open;
# every NOTIFY is counted; `promtool check metrics` accepts the text with
# no findings; /healthz answers 200, 503 once Redis is killed, and 200
# again within seconds of Redis coming back (the agent reconnects with a
# backoff capped at 2 s). promtool is required (Debian package prometheus,
# in scripts/deps.sh): without it this test fails.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

MET_PORT=$(port 5)
MURL="http://127.0.0.1:$MET_PORT"
# Redis budget 50ms: the exact counts below count no degraded decision,
# and at 10ms a loaded host timed Redis out (3.4 run: 4 allowed, 1 degraded)
write_policy 5 5/min 50ms
cat >>"$POLICY" <<EOF
metrics:
  listen: "127.0.0.1:$MET_PORT"
log:
  level: info
EOF
start_stack
rc=$?
ok $rc "redis, agent and haproxy up; agent UP per the health check"
[ $rc -eq 0 ] || finish
wait_port "$MET_PORT" 5
ok $? "the agent serves metrics on the policy's metrics.listen ($MET_PORT)"

# scrape: the whole /metrics text into $TMP/metrics.txt; prints the code.
scrape() {
	curl -s -o "$TMP/metrics.txt" -w '%{http_code}' --max-time 2 "$MURL/metrics"
}
# healthz: the status code of GET /healthz.
healthz() {
	curl -s -o /dev/null -w '%{http_code}' --max-time 2 "$MURL/healthz"
}
# wait_healthz CODE SECONDS: until /healthz answers CODE; prints the time
# it took in ms (at 100 ms steps), or "timeout".
wait_healthz() {
	i=0
	while [ $i -lt $(($2 * 10)) ]; do
		[ "$(healthz)" = "$1" ] && { echo $((i * 100)); return 0; }
		sleep 0.1; i=$((i + 1))
	done
	echo timeout
	return 1
}

expect_eq "$(healthz)" 200 "/healthz is 200 with Redis up"
expect_eq "$(scrape)" 200 "GET /metrics before traffic"
n0=$(metric "$MET_PORT" 'spoa_rl_spop_frames_total{type="notify"}')

# ---- traffic: 5 allowed, then 7 denied ------------------------------------
N=5; M=7
codes=""
for i in $(seq 1 $((N + M))); do
	codes="$codes $(req -H 'X-Tenant: acme' "$URL/")"
done
want=""
for i in $(seq 1 $N); do want="$want 200"; done
for i in $(seq 1 $M); do want="$want 429"; done
expect_eq "$codes" "$want" "$N requests pass, the next $M get 429"

expect_eq "$(scrape)" 200 "GET /metrics after traffic"
expect_eq "$(metric "$MET_PORT" 'spoa_rl_decisions_total{rule="tenant",outcome="allowed"}')" $N \
	"decisions_total{rule=tenant,outcome=allowed} is exactly $N"
expect_eq "$(metric "$MET_PORT" 'spoa_rl_decisions_total{rule="tenant",outcome="denied"}')" $M \
	"decisions_total{rule=tenant,outcome=denied} is exactly $M"
expect_eq "$(metric "$MET_PORT" 'spoa_rl_decisions_total{rule="tenant",outcome="degraded"}')" 0 \
	"no degraded decisions"
expect_eq "$(metric "$MET_PORT" 'spoa_rl_decisions_total{rule="login-account",outcome="allowed"}')" 0 \
	"the login rule saw nothing"
conns=$(metric "$MET_PORT" spoa_rl_spop_connections)
[ "$conns" -gt 0 ]
ok $? "spoa_rl_spop_connections gauge > 0 (got $conns)"
total=$(metric "$MET_PORT" spoa_rl_spop_connections_total)
[ "$total" -gt 0 ] && [ "$total" -ge "$conns" ]
ok $? "spoa_rl_spop_connections_total ($total) >= open connections ($conns)"
notify=$(metric "$MET_PORT" 'spoa_rl_spop_frames_total{type="notify"}')
[ "$((notify - n0))" -ge $((N + M)) ]
ok $? "frames_total{type=notify} grew by at least $((N + M)) (from $n0 to $notify)"
hello=$(metric "$MET_PORT" 'spoa_rl_spop_frames_total{type="hello"}')
[ "$hello" -ge 1 ]
ok $? "frames_total{type=hello} >= 1 (got $hello)"
grep -q '^spoa_rl_build_info{version="[^"]*"} 1$' "$TMP/metrics.txt"
ok $? "build_info present"
cnt=$(metric "$MET_PORT" spoa_rl_redis_request_duration_seconds_count)
[ "$cnt" -ge 1 ]
ok $? "Redis latency histogram observed the requests (count $cnt)"
! grep -qi 'acme' "$TMP/metrics.txt"
ok $? "no tenant in any label"

if command -v promtool >/dev/null 2>&1; then
	promtool check metrics <"$TMP/metrics.txt" >"$TMP/promtool.log" 2>&1
	rc=$?
	[ $rc -eq 0 ] || cat "$TMP/promtool.log"
	ok $rc "promtool check metrics accepts /metrics after real traffic"
	expect_eq "$(cat "$TMP/promtool.log")" "" "promtool: no lint findings"
else
	ok 1 "promtool check metrics: promtool is missing (apt-get install prometheus; make deps)"
fi

# ---- /healthz follows Redis ------------------------------------------------
eval "rpid=\$REDIS_PID_$REDIS_PORT"
{ kill -9 "$rpid"; wait "$rpid"; } 2>/dev/null
t=$(wait_healthz 503 5)
ok $? "/healthz turns 503 once Redis is killed (after ${t} ms)"
expect_eq "$(scrape)" 200 "/metrics is still served with Redis down"
start_redis "$REDIS_PORT"
ok $? "Redis restarted on the same port"
t=$(wait_healthz 200 6)
ok $? "/healthz is 200 again after Redis returns (after ${t} ms)"
c=$(req -H 'X-Tenant: globex' "$URL/")
expect_eq "$c" 200 "requests are decided by Redis again"
expect_eq "$(metric "$MET_PORT" 'spoa_rl_decisions_total{rule="tenant",outcome="allowed"}')" $((N + 1)) \
	"that request counts as allowed, not degraded"

# ---- logs -------------------------------------------------------------------
grep -q 'msg=httpd_listening addr=127.0.0.1:'"$MET_PORT" "$TMP/agent.log"
ok $? "the agent logged where metrics are served"
grep -q 'level=warn msg=redis_disconnected' "$TMP/agent.log"
ok $? "the Redis state change is logged"
! grep -q 'msg=decision ' "$TMP/agent.log"
ok $? "no per-request log lines by default (log.sample is 0)"

finish
