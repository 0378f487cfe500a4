#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Reserve, then settle across a pool (issue 19, "Exactness targets"): two
# HAProxy instances (the shipped haproxy.cfg) and three agents sharing one
# Redis, one reserving rule (a budget of 9,000 tokens, gcra 9000/day,
# reserve: "{max_tokens}", fail: closed) and a backend that holds every
# request it gets until the test lets it go (a gate), then answers with
# the token count the request asked for (X-Demo-Tokens -> X-Tokens-Used):
#   1. 60 requests at once (30 through each HAProxy) reserving 300 each,
#      the backend holding them: exactly floor(9000 / 300) = 30 reach it
#      (0 over-admission, and none short: nothing failed), the other 30
#      are 429; Redis holds 30 reservation records whose units sum to
#      9,000, and the agents counted 9,000 units reserved;
#   2. the gate opens, each of the 30 spends 100: the settles refund 200
#      each (6,000 in all), every record is gone;
#   3. 60 more at once, spending what they reserve: exactly 6000 / 300 =
#      20 pass (the refund, no more: gcra's refill is 1 token per 9.6 s).
# Counts, not timing: the gate holds the admitted requests for as long as
# the test needs, and every timeout on the way (SPOE processing, Redis,
# curl) is generous, so a loaded machine makes it slower, not wrong.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

A2P=$(port 5); A3P=$(port 6)
M1=$(port 10); M2=$(port 11); M3=$(port 12)
H2_PORT=$(port 7); APP2_PORT=$(port 8); STATS2_PORT=$(port 9)
BE_PORT=$(port 13)
export RL_AGENT2="127.0.0.1:$A2P" RL_AGENT3="127.0.0.1:$A3P"
export RL_BACKEND="127.0.0.1:$BE_PORT"
BUDGET=9000; RESERVE=300; N=60
GATE=$TMP/gate

# The shipped SPOE file with a timeout processing a loaded machine meets
# (100 ms there: an ACK later than that is fail-open in haproxy.cfg, an
# admission with no reservation, which this test must not see).
sed 's/^\( *timeout processing\).*/\1 3s/' "$ROOT/haproxy/spoe-ratelimit.conf" \
	>"$TMP/spoe.conf"
export RL_SPOE_CONF="$TMP/spoe.conf"

{
	policy_head 1s
	cat <<EOF
processing_timeout: 2s
pool_size: 3
rules:
  - name: pool-tokens
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    rate: $BUDGET/day
    burst: $BUDGET
    reserve: "{max_tokens}"
    cost: "{cost}"
    lease: 2m
    fail: closed
    missing: skip
EOF
} >"$POLICY"
policy_valid "the reserving policy is valid"

# The backend: holds each request while $GATE exists, then answers 200
# with X-Tokens-Used = X-Demo-Tokens; $TMP/held counts the requests it got.
cat >"$TMP/backend.py" <<'EOF'
import os, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port, gate, held = int(sys.argv[1]), sys.argv[2], sys.argv[3]
lock = threading.Lock()
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        with lock:
            with open(held, "a") as f:
                f.write("1\n")
        while os.path.exists(gate):
            time.sleep(0.02)
        n = self.headers.get("X-Demo-Tokens", "300")
        body = b'{"ok":true}\n'
        self.send_response(200)
        self.send_header("X-Tokens-Used", n)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
ThreadingHTTPServer.daemon_threads = True
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
EOF
: >"$TMP/held"
python3 "$TMP/backend.py" "$BE_PORT" "$GATE" "$TMP/held" >"$TMP/backend.log" 2>&1 &
PIDS="$PIDS $!"
wait_port "$BE_PORT" 10
ok $? "the gated backend listens"

start_redis "$REDIS_PORT"
start_pool -r "redis://127.0.0.1:$REDIS_PORT/0"

# wave NAME SPENT: N requests at once, half through each HAProxy, each
# reserving $RESERVE and spending SPENT; one status code per file
# $TMP/NAME.<i> when it is answered. Their pids in WAVE.
wave() {
	WAVE=""
	for i in $(seq "$N"); do
		if [ $((i % 2)) = 0 ]; then h=$HAP_PORT; else h=$H2_PORT; fi
		(
			c=$(curl -s -o /dev/null -w '%{http_code}' --max-time 60 \
				-H 'X-Tenant: pool' -H "X-Max-Tokens: $RESERVE" \
				-H "X-Demo-Tokens: $2" \
				"http://127.0.0.1:$h/v1/completions" 2>/dev/null)
			echo "${c:-000}" >"$TMP/$1.$i"
		) &
		WAVE="$WAVE $!"
	done
}
count() { cat "$TMP/$1".* 2>/dev/null | grep -c "^$2\$"; }
answered() { ls "$TMP/$1".* 2>/dev/null | wc -l; }
held() { wc -l <"$TMP/held"; }
sum_metric() {
	echo $(( $(metric "$M1" "$1") + $(metric "$M2" "$1") + $(metric "$M3" "$1") ))
}
# records: the reservation records in Redis, and the units they hold
records() { rc "$REDIS_PORT" --scan --pattern 'rl:{pool-tokens:tenant:pool}:r:*'; }
record_units() {
	records | while read -r k; do rc "$REDIS_PORT" get "$k"; done |
		awk -F: '{ s += $1 } END { print s + 0 }'
}

# ---- 1. the gate closed: admissions only ----------------------------------
touch "$GATE"
wave w1 100
# the 429s come back at once; the admitted requests wait at the backend
until_ok 300 eval '[ "$(answered w1)" -ge $((N - BUDGET / RESERVE)) ] && [ "$(held)" -ge $((BUDGET / RESERVE)) ]'
sleep 1	# a request admitted late would show up here
expect_eq "$(held)" $((BUDGET / RESERVE)) \
	"$N reservations of $RESERVE at once on 2 haproxys and 3 agents: exactly $((BUDGET / RESERVE)) reach the backend"
expect_eq "$(count w1 429)/$(answered w1)" "$((N - BUDGET / RESERVE))/$((N - BUDGET / RESERVE))" \
	"the other $((N - BUDGET / RESERVE)) are 429, and nothing else has been answered"
expect_eq "$(records | wc -l)" $((BUDGET / RESERVE)) \
	"Redis holds one reservation record per admitted request"
expect_eq "$(record_units)" "$BUDGET" "the records hold the whole budget, $BUDGET units"
expect_eq "$(sum_metric spoa_rl_reserve_units_reserved_total)" "$BUDGET" \
	"the agents counted $BUDGET units reserved"

# ---- 2. the gate opens: each spends 100 of its 300 -------------------------
rm -f "$GATE"
wait $WAVE
expect_eq "$(count w1 200)/$(count w1 429)" "$((BUDGET / RESERVE))/$((N - BUDGET / RESERVE))" \
	"wave 1: $((BUDGET / RESERVE)) answered 200, the rest 429"
REFUND=$(( BUDGET / RESERVE * (RESERVE - 100) ))
until_ok 100 eval '[ "$(sum_metric spoa_rl_reserve_units_refunded_total)" -ge $REFUND ]'
expect_eq "$(sum_metric spoa_rl_reserve_units_refunded_total)" "$REFUND" \
	"the settles refunded 200 each: $REFUND"
expect_eq "$(records | wc -l)" 0 "every reservation record is settled (deleted)"
expect_eq "$(sum_metric spoa_rl_reserve_settles_unmatched_total)" 0 \
	"every settle found its reservation"

# ---- 3. the refund, and no more, lets requests through ----------------------
: >"$TMP/held"
wave w2 "$RESERVE"
wait $WAVE
expect_eq "$(count w2 200)/$(count w2 429)" "$((REFUND / RESERVE))/$((N - REFUND / RESERVE))" \
	"wave 2: exactly the refund's $((REFUND / RESERVE)) requests pass, the rest are 429"
expect_eq "$(held)" $((REFUND / RESERVE)) "and only those reached the backend"
until_ok 50 eval '[ -z "$(records)" ]'
expect_eq "$(records | wc -l)" 0 "their settles (spent = reserved) deleted their records"
expect_eq "$(sum_metric spoa_rl_reserve_units_refunded_total)" "$REFUND" \
	"spending what was reserved refunds nothing"

d1=$(metric "$M1" spoa_rl_decisions_total); d2=$(metric "$M2" spoa_rl_decisions_total)
d3=$(metric "$M3" spoa_rl_decisions_total)
[ "$d1" -gt 0 ] && [ "$d2" -gt 0 ] && [ "$d3" -gt 0 ]
ok $? "all three agents decided some of the requests ($d1 $d2 $d3)"
bad=$(answered "$TMP/haproxy.log" "$TMP/haproxy2.log" | grep '"GET /v1/completions ' | grep -cv 'rl_error=0 .*rl_degraded=0 ')
expect_eq "$bad" 0 "no SPOE error and no degraded decision in either haproxy log"
[ -n "${KEEP_TMP:-}" ] && cp -r "$TMP" "$KEEP_TMP"
finish
