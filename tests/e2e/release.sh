#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Response-phase wiring of rl-done: a concurrency rule (limit 1 in flight,
# lease 5m) only lets sequential requests through if every response sends
# rl-done with the key args and the unique-id that rl-request carried, and
# refuses a second request while one is in flight. The same holds for a
# store: local twin of the rule, whose leases the agent keeps in process
# (integration/leases.sh: a release that reaches another worker). Also: the
# rl-request args that come from haproxy.cfg (API key, hashed) are usable
# as keys.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

{
	policy_head 50ms	# under timeout processing 100ms; 10ms timed out on a loaded host
	cat <<EOF
rules:
  - name: inflight
    message: rl-request
    key: "inflight:{tenant}"
    algorithm: concurrency
    limit: 1
    lease: 5m
    id: "{id}"
    release: rl-done
    fail: open
    missing: skip
  - name: inflight_local
    message: rl-request
    key: "linflight:{tenant}"
    algorithm: concurrency
    limit: 1
    lease: 5m
    id: "{id}"
    release: rl-done
    store: local
    missing: skip
  - name: apikey
    message: rl-request
    key: "apikey:{key}"
    algorithm: gcra
    rate: 2/min
    burst: 2
    fail: open
    missing: skip
EOF
} >"$POLICY"
start_stack
ok $? "stack up, agent UP"

codes=""
for i in $(seq 8); do codes="$codes $(req -H 'X-Tenant: c1' "$URL/")"; done
expect_eq "$codes" " 200 200 200 200 200 200 200 200" \
	"8 sequential requests under a 1-in-flight limit pass (rl-done releases each slot, in Redis and in process)"

# Two at once: the second finds the slot taken (the app's /slow holds the
# first for 1 s); once both are done the slot is free again.
curl -s -o /dev/null -w '%{http_code}' --max-time 3 -H 'X-Tenant: c2' \
	"$URL/slow" >"$TMP/slow1" 2>/dev/null &
slow_pid=$!
sleep 0.3
c=$(req -H 'X-Tenant: c2' "$URL/")
wait "$slow_pid"
expect_eq "$(cat "$TMP/slow1") $c" "200 429" "a 2nd request while one is in flight: 429"
ra=$(hdr Retry-After)
is_posint "$ra"; ok $? "that 429 has a positive Retry-After ('$ra')"
expect_eq "$(req -H 'X-Tenant: c2' "$URL/")" 200 "after the slow request is done the slot is free"

codes=""
for i in 1 2 3; do codes="$codes $(req -H 'X-Api-Key: secret-1' "$URL/")"; done
expect_eq "$codes" " 200 200 429" "the API key is a usable key (burst 2, then 429)"
expect_eq "$(req -H 'X-Api-Key: secret-2' "$URL/")" 200 "another API key has its own budget"
if command -v redis-cli >/dev/null; then
	! redis-cli -p "$REDIS_PORT" --scan 2>/dev/null | grep -q 'secret-1'
	ok $? "the raw API key never reaches Redis (it is hashed in haproxy.cfg)"
fi

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"

finish
