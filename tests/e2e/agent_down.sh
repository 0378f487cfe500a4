#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The agent itself dies (kill -9): HAProxy sets txn.rl.error and the shipped
# config's per-route fail mode applies: open routes answer 200, /login
# (fail-closed) answers 503 with Retry-After; nothing hangs or returns 500,
# both before the health check notices (error 1, timeout processing, or
# 257, the connection reset) and after it marks the agent DOWN (at once,
# with error 2 on HAProxy 2.6 and 257 on 3.1+: haproxy/README.md). A
# restarted agent is seen UP again and the limits (state in Redis) apply
# again.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

# 5/hour: t1 must still be over its burst after the kill, the DOWN
# phase and the restart, however long a loaded machine takes for them.
# A Redis budget of 50ms (under timeout processing 100ms): the 10ms one
# timed out on a loaded 2-core host, and fail: open let t1's 6th through.
write_policy 5 5/hour 50ms
start_stack
ok $? "stack up, agent UP"

# Use up tenant "t1"'s burst while the agent is alive.
for i in 1 2 3 4 5; do req -H 'X-Tenant: t1' "$URL/" >/dev/null; done
expect_eq "$(req -H 'X-Tenant: t1' "$URL/")" 429 "t1 over its burst: 429 (agent alive)"

kill -9 "$AGENT_PID"
wait "$AGENT_PID" 2>/dev/null

# check N LABEL: N rounds of an open route and the fail-closed /login.
check() {
	bad_open=""; bad_login=""; slow=""; bad_ra=""
	for i in $(seq "$1"); do
		c=$(req -H 'X-Tenant: t1' "$URL/")
		[ "$c" = 200 ] || bad_open="$bad_open $c"
		[ "$(last_time_ms)" -lt 2000 ] || slow="$slow /:$(last_time_ms)ms"
		c=$(req -X POST -H 'X-Tenant: t2' -H 'X-Login-User: bob' "$URL/login")
		[ "$c" = 503 ] || bad_login="$bad_login $c"
		[ "$(last_time_ms)" -lt 2000 ] || slow="$slow /login:$(last_time_ms)ms"
		is_posint "$(hdr Retry-After)" || bad_ra="$bad_ra '$(hdr Retry-After)'"
	done
	expect_eq "$bad_open" "" "$2: fail-open route answers 200 (not 429/500)"
	expect_eq "$bad_login" "" "$2: fail-closed POST /login answers 503"
	expect_eq "$bad_ra" "" "$2: the 503s carry a positive Retry-After"
	expect_eq "$slow" "" "$2: every answer within 2 s"
}

# Right away: HAProxy still thinks the agent is UP (error 1 after timeout
# processing, or 257 on a reset connection).
check 3 "agent killed, before the health check"
grep -q 'rl_error=[1-9]' "$TMP/haproxy.log"
ok $? "haproxy's log shows txn.rl.error set"

wait_srv_state 0 10
ok $? "the health check marks be_spoa_rl/rl1 DOWN"
# No agent UP: 2.6 finds no applet (SPOE_CTX_ERR_RES, 2); 3.1+ gets an
# I/O error on the SPOP stream that cannot connect (256 + 1).
if haproxy_atleast 3.1; then down_err=257; else down_err=2; fi
from=$(($(wc -l <"$TMP/haproxy.log") + 1))
check 5 "agent DOWN"
tail -n +"$from" "$TMP/haproxy.log" | grep ' rl_status=' >"$TMP/down.log"
expect_eq "$(grep -c . "$TMP/down.log")" 10 "agent DOWN: 10 request log lines"
# At once, not after timeout processing (100 ms): under 50 ms, so that a
# busy shared machine's scheduling delay does not read as a wait.
expect_eq "$(grep -vcE " rl_error=$down_err rl_ms=[0-4]?[0-9] " "$TMP/down.log")" 0 \
	"with the agent DOWN every error is $down_err (no agent up on $(haproxy_version)), at once (under half of timeout processing)"
c=$(req -H 'X-Tenant: t2' "$URL/api/orders")
expect_eq "$c" 200 "any other route is fail-open too"

# Back up: the same Redis still holds t1's state.
stack_agent "$POLICY"
wait_srv_state 2 10
ok $? "restarted agent is UP again"
expect_eq "$(req -H 'X-Tenant: t1' "$URL/")" 429 "t1 still over its burst after the restart (state in Redis)"
expect_eq "$(req -H 'X-Tenant: t3' "$URL/")" 200 "a fresh tenant passes after the restart"

finish
