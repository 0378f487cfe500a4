#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The agent under valgrind (memcheck, --leak-check=full, definite and
# indirect leaks count as errors, --error-exitcode=3) through a life that
# touches most of its code: allowed and denied requests on Redis rules,
# tenant plans from a Redis hash, a local-tier rule, a concurrency lease
# and its release, failure counting, the sampled decision log, malformed
# frames, /metrics and /healthz scrapes, Redis down for a moment (fail
# open, closed and local, the fail-mode log), a good and a bad SIGHUP
# reload (the good one moves the metrics server), then SIGTERM. Passes
# when valgrind exits 0: no memory error and no definite or indirect
# leak ("definitely lost: 0 bytes", or no leak summary at all because
# every block was freed). Slow (valgrind is ~30x), bounded by the waits.
. "$(dirname "$0")/../lib.sh"
case $BUILD in *asan*)
	# valgrind cannot run a binary built with ASan; make test covers it.
	echo "valgrind.sh: skipped under ASan (make test runs it)"
	exit 0 ;;
esac
RP=$(port 21); AP=$(port 22); MP=$(port 23); MP2=$(port 24)
VLOG="$TMP/valgrind.log"

if ! command -v valgrind >/dev/null 2>&1; then
	ok 1 "valgrind is installed (apt-get install valgrind; make deps)"
	finish
fi

# policy METRICS_PORT BURST: the policy file, with a metrics port and the
# ip rule's burst as parameters (the reload changes both).
policy() {
	cat <<YAML
listen: 127.0.0.1:$AP
workers: 2
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 2s }
processing_timeout: 5s
metrics: { listen: "127.0.0.1:$1" }
log: { level: debug, sample: 1 }
plans:
  free: { rate: 5/min, burst: 3 }
  pro:  { rate: 600/min, burst: 50 }
tenants: { bigco: pro }
plan_lookup: { arg: plan, redis_hash: plans, default: free, cache: 1s }
rules:
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    plan: rate
    fail: open
  - name: ip
    message: rl-request
    key: "ip:{ip/24}"
    rate: 100/s
    burst: $2
    fail: local
    missing: skip
  - name: flood
    message: rl-request
    key: "flood:{tenant}"
    store: local
    rate: 1000/s
    burst: 1000
  - name: exports
    message: rl-export
    key: "exp:{tenant}"
    algorithm: concurrency
    limit: 1
    lease: 1m
    release: rl-export-done
    fail: closed
  - name: login
    message: rl-login
    key: "login:{user}"
    algorithm: sliding-log
    limit: 3
    window: 15m
    count: failures
    fail: closed
YAML
}

policy "$MP" 100 >"$TMP/policy.yaml"
"$ROOT/$BUILD/spoa-ratelimit" -c -f "$TMP/policy.yaml" >/dev/null
ok $? "the test policy is valid"
start_redis "$RP"
redis-cli -p "$RP" HSET plans acme pro >/dev/null

valgrind --leak-check=full --errors-for-leak-kinds=definite,indirect \
	--error-exitcode=3 --log-file="$VLOG" \
	"$ROOT/$BUILD/spoa-ratelimit" -f "$TMP/policy.yaml" >>"$TMP/agent.log" 2>&1 &
AGENT_PID=$!
PIDS="$PIDS $AGENT_PID"
wait_port "$AP" 60
rc=$?
ok $rc "the agent starts under valgrind"
[ $rc -eq 0 ] || finish
wait_port "$MP" 20
ok $? "metrics served on the policy's metrics.listen"

c() { "$CLIENT" -t 15000 -a "127.0.0.1:$AP" "$@"; }
statuses() { field status | tr '\n' ' '; }

# ---- traffic -----------------------------------------------------------------
expect_eq "$(c -n 5 rl-request tenant=s:free1 ip=4:10.0.0.1 | statuses)" \
	"0 0 0 429 429 " "free plan: burst 3, then 429"
expect_eq "$(c -n 4 -P 4 rl-request tenant=s:bigco ip=4:10.0.0.2 | statuses)" \
	"0 0 0 0 " "static pro tenant, pipelined"
# The Redis-hash plan lookup runs (and is cached); which plan answers the
# first requests is the plancache suite's business, not this one's.
expect_eq "$(c -n 2 rl-request tenant=s:acme ip=4:10.0.0.3 | grep -c '^ack')" 2 \
	"tenant plan looked up in the Redis hash"
sleep 0.5
expect_eq "$(c -n 2 rl-request tenant=s:acme ip=4:10.0.0.3 | grep -c '^ack')" 2 \
	"and answered from the plan cache"
expect_eq "$(c rl-request tenant=s: | statuses)" "429 " "missing tenant: deny"
expect_eq "$(c rl-export tenant=s:acme id=s:r1 | statuses)" "0 " "concurrency: slot taken"
expect_eq "$(c rl-export tenant=s:acme id=s:r2 | statuses)" "429 " "concurrency: a second request waits"
c rl-export-done tenant=s:acme id=s:r1 >/dev/null
expect_eq "$(c rl-export tenant=s:acme id=s:r3 | statuses)" "0 " "released slot reused"
for i in 1 2 3 4; do c rl-login-result user=s:bob status=i:401 >/dev/null; done
expect_eq "$(c rl-login user=s:bob | statuses)" "429 " "failure counting refuses"
c -H >/dev/null
ok $? "health-check HELLO"

# ---- malformed frames (each closes its connection) --------------------------
c -x "00000000" | grep -q 'disconnect status=4'
ok $? "zero-length frame: disconnect status=4"
c -x "00010000" | grep -q 'disconnect status=3'
ok $? "oversized frame: disconnect status=3"
c -x "00000012 03 00000001 01 01 06 726c2d726571 01 01 78 08" | grep -q 'disconnect status=4'
ok $? "truncated NOTIFY: disconnect status=4"

# ---- the metrics server --------------------------------------------------------
curl -sf --max-time 10 "http://127.0.0.1:$MP/metrics" | grep -q '^spoa_rl_decisions_total'
ok $? "GET /metrics"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$MP/healthz")" \
	200 "GET /healthz"
expect_eq "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$MP/nope")" \
	404 "GET /nope"

# ---- Redis down for a moment ----------------------------------------------------
eval "rpid=\$REDIS_PID_$RP"
{ kill -9 "$rpid"; wait "$rpid"; } 2>/dev/null
sleep 1
out=$(c -n 3 rl-request tenant=s:down1 ip=4:10.9.0.1)
expect_eq "$(echo "$out" | field degraded | tr '\n' ' ')" "1 1 1 " \
	"Redis down: fail open/local decide, degraded"
expect_eq "$(c rl-export tenant=s:down1 id=s:x | statuses)" "503 " "fail closed: 503"
grep -q 'msg=fail_mode rule=tenant mode=open reason=redis_down' "$TMP/agent.log"
ok $? "fail-mode activation logged"
expect_eq "$(grep -c 'msg=fail_mode rule=tenant ' "$TMP/agent.log")" 1 \
	"once per rule per interval (3 activations, 1 line)"
start_redis "$RP"
i=0
until [ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "http://127.0.0.1:$MP/healthz")" = 200 ] ||
	[ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
expect_eq "$(c rl-request tenant=s:back ip=4:10.0.0.9 | field degraded)" 0 \
	"Redis back: decided by Redis again"

# ---- reloads ----------------------------------------------------------------------
policy "$MP2" 1 >"$TMP/policy.yaml"
kill -HUP "$AGENT_PID"
wait_port "$MP2" 20
ok $? "a reload that changes metrics.listen moves the metrics server"
expect_eq "$(c -n 2 rl-request tenant=s:r2 ip=4:10.7.0.1 | statuses)" "0 429 " \
	"the reloaded policy applies (ip burst 1)"
echo "rules: [ { name: broken } ]" >"$TMP/policy.yaml"
kill -HUP "$AGENT_PID"
sleep 2
grep -q 'msg=reload_failed' "$TMP/agent.log"
ok $? "a bad file is refused on SIGHUP"
expect_eq "$(c rl-request tenant=s:r3 ip=4:10.6.0.1 | statuses)" "0 " "the old policy still serves"
curl -sf --max-time 10 "http://127.0.0.1:$MP2/metrics" >/dev/null
ok $? "metrics after the reloads"

# ---- a lease in flight at the exit ------------------------------------------------
# Redis stopped, and a concurrency request whose client gives up: at SIGTERM
# the workers have no connection left and exit with its charging call
# unanswered. The call's NULL reply refuses it (fail: closed) and the agent
# gives the lease back itself; that release must fail at once, not wait on
# the store being freed (the request and its conn leaked before).
eval "rpid=\$REDIS_PID_$RP"
kill -STOP "$rpid"
c -t 500 rl-export tenant=s:exit1 id=s:e1 >/dev/null 2>&1
# and a NOTIFY refused for a bad message as the last request of a worker:
# its request is back in the pool, not live (the exit released it again)
for i in 1 2 3 4; do
	c -x "00000012 03 00000001 01 01 06 726c2d726571 01 01 78 08" >/dev/null 2>&1
done

# ---- stop and the verdict ----------------------------------------------------------
kill -TERM "$AGENT_PID"
i=0
while kill -0 "$AGENT_PID" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
wait "$AGENT_PID"
rc=$?
PIDS=$(echo "$PIDS" | sed "s/ $AGENT_PID\b//")
kill -CONT "$rpid"
[ "$rc" -ne 3 ]
ok $? "valgrind found no memory error and no definite/indirect leak (exit $rc)"
expect_eq "$rc" 0 "the agent exits 0 on SIGTERM"
grep -q 'ERROR SUMMARY: 0 errors' "$VLOG"
ok $? "valgrind: ERROR SUMMARY: 0 errors"
if grep -q 'LEAK SUMMARY' "$VLOG"; then
	grep -q 'definitely lost: 0 bytes' "$VLOG" && grep -q 'indirectly lost: 0 bytes' "$VLOG"
	ok $? "valgrind: definitely and indirectly lost: 0 bytes"
else
	grep -q 'All heap blocks were freed' "$VLOG"
	ok $? "valgrind: all heap blocks were freed"
fi
if [ "$FAIL" -ne 0 ]; then
	echo "--- valgrind log"
	sed -n '/HEAP SUMMARY/,$p;/Invalid\|uninitialised\|definitely lost in/,+25p' "$VLOG" | head -150
fi
finish
