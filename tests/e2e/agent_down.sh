#!/bin/bash
# The agent itself dies (kill -9): HAProxy sets txn.rl.error and the shipped
# config's per-route fail mode applies: open routes answer 200, /login
# (fail-closed) answers 503 with Retry-After; nothing hangs or returns 500,
# both before the health check notices (error 1, timeout processing) and
# after it marks the agent DOWN (error 2, immediate). A restarted agent is
# seen UP again and the limits (state in Redis) apply again.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

write_policy 5 5/min
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
check 5 "agent DOWN"
grep -q 'rl_error=2 ' "$TMP/haproxy.log"
ok $? "with the agent DOWN the error is 2 (no agent up)"
c=$(req -H 'X-Tenant: t2' "$URL/api/orders")
expect_eq "$c" 200 "any other route is fail-open too"

# Back up: the same Redis still holds t1's state.
start_agent "$POLICY" -l "127.0.0.1:$AGENT_PORT" -r "redis://127.0.0.1:$REDIS_PORT/0"
wait_srv_state 2 10
ok $? "restarted agent is UP again"
expect_eq "$(req -H 'X-Tenant: t1' "$URL/")" 429 "t1 still over its burst after the restart (state in Redis)"
expect_eq "$(req -H 'X-Tenant: t3' "$URL/")" 200 "a fresh tenant passes after the restart"

finish
