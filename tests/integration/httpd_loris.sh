#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The metrics/health server against a slowloris: 200 connections that send
# nothing, each reopened the moment the agent closes it. /healthz (Docker's
# HEALTHCHECK, a readiness probe) must still answer: a new connection takes
# the slot of the oldest one still reading. Before, the 64 slots and the
# listen backlog stayed full of idle sockets and /healthz got nothing.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); MP=$(port 3)
start_redis "$RP"
cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
metrics: { listen: "127.0.0.1:$MP" }
redis: { url: "redis://127.0.0.1:$RP/0" }
rules:
  - { name: t, message: rl-request, key: "t:{tenant}", rate: 5/s }
YAML
agent_up "$TMP/policy.yaml"
health() { curl -s -o /dev/null -w '%{http_code}' --max-time 3 "http://127.0.0.1:$MP/healthz"; }
expect_eq "$(health)" 200 "/healthz before"
"$TOOLS/tcp-hold" "127.0.0.1:$MP" 200 15 >"$TMP/hold.out" 2>&1 &
HOLD=$!
PIDS="$PIDS $HOLD"
until_ok 100 grep -q ready "$TMP/hold.out"; ok $? "200 idle connections held open"
sleep 1
got=""
for i in 1 2 3 4 5; do got="$got$(health) "; done
expect_eq "$got" "200 200 200 200 200 " "/healthz under the slowloris: 5 of 5 answered within 3 s"
n=$(curl -s --max-time 3 "http://127.0.0.1:$MP/metrics" | grep -c '^spoa_rl_')
[ "$n" -gt 10 ]; ok $? "/metrics answers too ($n series)"
kill "$HOLD" 2>/dev/null
wait "$HOLD" 2>/dev/null
expect_eq "$(health)" 200 "/healthz after"
finish
