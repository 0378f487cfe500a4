#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The agent on a unix socket (-l unix:/path), HAProxy pointed at it with
# RL_AGENT=unix@/path (HAProxy's spelling): the health check passes and
# the tenant's burst and 429 work as over TCP.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

write_policy 5 5/min
export RL_AGENT="unix@$TMP/agent.sock"
start_redis "$REDIS_PORT"
start_agent "$POLICY" -l "unix:$TMP/agent.sock" -r "redis://127.0.0.1:$REDIS_PORT/0"
i=0; while [ ! -S "$TMP/agent.sock" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i + 1)); done
[ -S "$TMP/agent.sock" ]; ok $? "the agent creates its unix socket"
start_haproxy "$HAP_CFG"
wait_port "$HAP_PORT" 10 && wait_port "$STATS_PORT" 5
ok $? "haproxy up"
wait_srv_state 2 10; ok $? "health check over the unix socket: UP"

codes=""
for i in 1 2 3 4 5 6; do codes="$codes $(req -H 'X-Tenant: u' "$URL/")"; done
expect_eq "$codes" " 200 200 200 200 200 429" "burst of 5, then 429, over the unix socket"
is_posint "$(hdr Retry-After)"; ok $? "the 429 has Retry-After ('$(hdr Retry-After)')"
! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE errors"

finish
