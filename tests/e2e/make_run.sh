#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# `make run` (scripts/demo.sh) with policies/example.yaml: it comes up, the
# curl loop it prints gives 200 x5 then 429 with Retry-After and RateLimit
# headers, and SIGTERM stops HAProxy, the agent and Redis, leaving nothing
# running and no temp dir.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

DEMO_PORT=$(port 10)
BUILD=$BUILD DEMO_PORT=$DEMO_PORT POLICY="$ROOT/policies/example.yaml" sh "$ROOT/scripts/demo.sh" >"$TMP/demo.out" 2>&1 &
DEMO_PID=$!
PIDS="$PIDS $DEMO_PID"
wait_port "$DEMO_PORT" 15
ok $? "demo.sh brings HAProxy up on $DEMO_PORT"
sleep 0.5	# first health check of the agent
kids=$(pgrep -P "$DEMO_PID" | tr '\n' ' ')
PIDS="$PIDS $kids"
expect_eq "$(echo $kids | wc -w)" 3 "demo.sh runs three processes (redis, agent, haproxy)"
dir=$(sed -n 's/.*temp dir \(\/tmp\/spoa-rl-demo\.[A-Za-z0-9]*\).*/\1/p' "$TMP/demo.out" | head -1)
[ -n "$dir" ] && [ -d "$dir" ]; ok $? "demo.sh uses a private temp dir ('$dir')"

grep -q "curl -si -H 'X-Tenant: acme' localhost:$DEMO_PORT/" "$TMP/demo.out"
ok $? "demo.sh prints how to try it with curl"

codes=""
for i in $(seq 7); do
	codes="$codes $(req -H 'X-Tenant: acme' "http://127.0.0.1:$DEMO_PORT/")"
done
expect_eq "$codes" " 200 200 200 200 200 429 429" "the printed loop: 200 x5, then 429"
is_posint "$(hdr Retry-After)"; ok $? "the 429 has Retry-After ('$(hdr Retry-After)')"
[[ $(hdr RateLimit) =~ $SF_LIST ]] && [[ $(hdr RateLimit-Policy) =~ $SF_LIST ]]
ok $? "the 429 has RateLimit and RateLimit-Policy"

kill -TERM "$DEMO_PID"
i=0
while kill -0 "$DEMO_PID" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
! kill -0 "$DEMO_PID" 2>/dev/null; ok $? "demo.sh exits on SIGTERM"
left=""
for p in $kids; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
expect_eq "$left" "" "nothing left running after SIGTERM"
! (exec 3<>"/dev/tcp/127.0.0.1/$DEMO_PORT") 2>/dev/null
ok $? "port $DEMO_PORT is free again"
[ -z "$dir" ] || [ ! -d "$dir" ]; ok $? "the demo's temp dir is removed"

finish
