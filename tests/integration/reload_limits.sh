#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# SIGHUP applies max_conns and idle_timeout, and says what it cannot:
#   1. max_conns: raised by a reload, the next connection is accepted;
#   2. idle_timeout: shortened by a reload, a connection opened before it
#      is closed at the new timeout (DISCONNECT status 2), not the old;
#      a connection opened after it too;
#   3. listen, workers, local.max_keys, redis.batch_wait, overrides: a
#      reload that changes them logs
#      needs_restart field=... for each (the running values stay), and a
#      reload that changes none of them logs none.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
start_redis "$RP"
# pol MAX_CONNS IDLE MAX_KEYS WORKERS LISTEN_PORT [BATCH_WAIT [OVERRIDES]]
pol() {
	cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$5
workers: $4
overrides: ${7:-true}
max_conns: $1
idle_timeout: $2
local: { max_keys: $3 }
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 50ms, batch_wait: ${6:-0ms} }
rules:
  - { name: t, message: rl-request, key: "t:{tenant}", rate: 100/s, burst: 100 }
YAML
}
reloads() { grep -c 'msg=reloaded' "$TMP/agent.log"; }
# reload: SIGHUP, then until the agent logs one more reload (5 s at most).
reload() {
	local n; n=$(reloads)
	kill -HUP "$AGENT_PID"
	until_ok 50 eval '[ "$(reloads)" -gt "$n" ]'
}
hello() { "$CLIENT" -a "127.0.0.1:$AP" -H -t 1000 2>&1 | grep -q '^hello'; }

pol 1 60s 1000 1 "$AP"
agent_up "$TMP/policy.yaml"
# The held connection: silent after its HELLO; with idle_timeout 60s it
# would be kept past this whole suite. (wait_port's own probe connection
# may still count against max_conns 1 for a moment: then the held one is
# refused, and is opened again.)
held_up() {
	"$CLIENT" -a "127.0.0.1:$AP" -x "" -t 15000 >"$TMP/held" 2>&1 &
	HELD=$!; PIDS="$PIDS $HELD"
	until_ok 50 grep -q . "$TMP/held"
	grep -q '^hello' "$TMP/held"
}
for _ in 1 2 3 4 5; do
	held_up && break
	kill "$HELD" 2>/dev/null; sleep 0.2
done
! hello; ok $? "max_conns 1, one connection held: another gets no AGENT-HELLO"

pol 3 1s 1000 1 "$AP"
t0=$EPOCHREALTIME
reload; ok $? "reload to max_conns 3 and idle_timeout 1s"
hello; ok $? "after the reload the next connection is accepted (max_conns 3)"
until_ok 40 grep -q 'disconnect status=2' "$TMP/held"
ok $? "the connection held from before the reload gets the idle DISCONNECT"
ms=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) * 1000 }')
[ "$ms" -lt 3000 ]; ok $? "at the new idle_timeout (1s), not the old 60s (${ms} ms after the reload)"
t0=$EPOCHREALTIME
out=$("$CLIENT" -a "127.0.0.1:$AP" -x "" -t 5000 2>&1)
ms=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) * 1000 }')
echo "$out" | grep -q 'disconnect status=2' && [ "$ms" -ge 800 ] && [ "$ms" -lt 3000 ]
ok $? "a connection opened after the reload: idle DISCONNECT at 1s (${ms} ms)"

before=$(grep -c 'msg=needs_restart' "$TMP/agent.log")
pol 3 1s 1000 1 "$AP"
sed -i 's/rate: 100\/s/rate: 50\/s/' "$TMP/policy.yaml"
reload
expect_eq "$(grep -c 'msg=needs_restart' "$TMP/agent.log")" "$before" \
	"a reload that changes only what it applies logs no needs_restart"
pol 3 1s 5000 2 "$(port 3)" 500us false
reload; ok $? "reload changing listen, workers, local.max_keys, batch_wait and overrides is accepted"
for f in listen workers local.max_keys redis.batch_wait overrides; do
	grep -q "level=warn msg=needs_restart field=$f " "$TMP/agent.log"
	ok $? "it logs needs_restart field=$f"
done
hello; ok $? "the agent still listens where it started"
finish
