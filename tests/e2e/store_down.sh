#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Redis frozen (SIGSTOP), then dead (kill -9), while the agent lives: the
# agent still ACKs within HAProxy's timeout processing and each rule
# applies its fail mode. The tenant rule
# (fail: open) lets requests through with txn.rl.degraded=1; the login rule
# (fail: closed) makes the agent answer status 503, which the shipped config
# turns into a 503 with Retry-After. No 500s, no hangs, no SPOE timeouts.
# A restarted Redis is used again.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

write_policy 5 5/min
start_stack
ok $? "stack up, agent UP"
expect_eq "$(req -H 'X-Tenant: a' "$URL/")" 200 "Redis up: 200"

eval "rpid=\$REDIS_PID_$REDIS_PORT"

# ---- Redis frozen (SIGSTOP): connected but silent, so only the agent's own
# per-request deadline (redis.timeout 10ms) can answer.
kill -STOP "$rpid"
bad=""; slow=""
for i in $(seq 5); do
	c=$(req -H 'X-Tenant: a' "$URL/")
	[ "$c" = 200 ] || bad="$bad /:$c"
	[ "$(last_time_ms)" -lt 1000 ] || slow="$slow /:$(last_time_ms)ms"
	c=$(req -X POST -H 'X-Tenant: b' -H 'X-Login-User: bob' "$URL/login")
	[ "$c" = 503 ] || bad="$bad /login:$c"
	[ "$(last_time_ms)" -lt 1000 ] || slow="$slow /login:$(last_time_ms)ms"
done
kill -CONT "$rpid"
expect_eq "$bad" "" "Redis frozen: fail: open passes (200), fail: closed refuses (503)"
expect_eq "$slow" "" "Redis frozen: every answer within 1 s"
! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "Redis frozen: no SPOE timeout (the agent answered within its deadline)"
# Requests answered by their fail mode while Redis was frozen still reach
# Redis when it thaws, and are counted then (the fail: open ones did pass):
# tenant b's burst is spent, so the next phases use tenants of their own.
ok_back=1
for i in $(seq 50); do
	[ "$(req -X POST -H 'X-Tenant: c' -H 'X-Login-User: carol' -H 'X-Login-Password: letmein' "$URL/login")" = 200 ] && { ok_back=0; break; }
	sleep 0.1
done
ok $ok_back "Redis thawed: decisions come from Redis again (within 5 s)"

# ---- Redis dead (kill -9): connection refused on reconnect.
kill -9 "$rpid"; wait "$rpid" 2>/dev/null
sleep 0.2

bad_open=""; bad_login=""; slow=""; bad_ra=""
for i in $(seq 8); do
	c=$(req -H 'X-Tenant: a' "$URL/")
	[ "$c" = 200 ] || bad_open="$bad_open $c"
	[ "$(last_time_ms)" -lt 1000 ] || slow="$slow /:$(last_time_ms)ms"
	c=$(req -X POST -H 'X-Tenant: d' -H 'X-Login-User: bob' "$URL/login")
	[ "$c" = 503 ] || bad_login="$bad_login $c"
	[ "$(last_time_ms)" -lt 1000 ] || slow="$slow /login:$(last_time_ms)ms"
	is_posint "$(hdr Retry-After)" || bad_ra="$bad_ra '$(hdr Retry-After)'"
done
expect_eq "$bad_open" "" "Redis down: the fail: open tenant rule lets requests through (200)"
expect_eq "$bad_login" "" "Redis down: the fail: closed login rule gives 503"
expect_eq "$bad_ra" "" "Redis down: each 503 carries a positive Retry-After"
expect_eq "$slow" "" "Redis down: every answer within 1 s"
grep -q 'rl_status=0 .*rl_error=0 .*rl_degraded=1' "$TMP/haproxy.log"
ok $? "the agent reports degraded=1 (haproxy log), with no SPOE error"
grep -q 'rl_status=503 .*rl_error=0 ' "$TMP/haproxy.log"
ok $? "the 503s come from the agent's status, not from an SPOE error"
! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors: the agent ACKed in time"

# Redis back on the same port: the agent reconnects (with backoff).
start_redis "$REDIS_PORT"
ok $? "redis restarted"
back=1
for i in $(seq 100); do
	c=$(req -X POST -H 'X-Tenant: b' -H 'X-Login-User: carol' \
		-H 'X-Login-Password: letmein' "$URL/login")
	[ "$c" = 200 ] && { back=0; break; }
	sleep 0.1
done
ok $back "after Redis returns, the fail-closed route answers again (200 within 10 s)"
# That answer came from one worker's link; each worker reconnects on its
# own backoff (capped at 1 s), so give the others that long.
sleep 1.2
codes=""
for i in 1 2 3 4 5 6; do codes="$codes $(req -H 'X-Tenant: fresh' "$URL/")"; done
expect_eq "$codes" " 200 200 200 200 200 429" "limits apply again once Redis is back"

finish
