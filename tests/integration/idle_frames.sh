#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A max_conns slot is held by whole frames, not by bytes. On one agent
# with max_conns 1:
#   1. a connection that never sends its HELLO is cut at the HELLO
#      deadline (5 s), not at idle_timeout (30 s here): HAProxy sends its
#      HELLO at connect and gives up on its own `timeout hello` (500ms in
#      the shipped config), so such a peer is no HAProxy;
#   2. the same for one that drips its HELLO a byte at a time: before, each
#      byte restarted the idle timer, and the slot was held for ever;
#   3. after its HELLO, one that drips a NOTIFY a byte at a time is cut at
#      idle_timeout (1 s after a reload), counted from its last whole frame.
# Each time the slot comes back: a new connection gets its AGENT-HELLO.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
pol() {
	policy_top "$AP" "redis://127.0.0.1:$RP/0" 50ms 1
	cat <<YAML
max_conns: 1
idle_timeout: $1
rules:
  - { name: t, message: rl-request, key: "t:{tenant}", rate: 100/s }
YAML
}
start_redis "$RP"
pol 30s >"$TMP/policy.yaml"
agent_up "$TMP/policy.yaml"
reloads() { grep -c 'msg=reloaded' "$TMP/agent.log"; }
hello() { "$CLIENT" -a "127.0.0.1:$AP" -H -t 1000 2>&1 | grep -q '^hello'; }
HELLO=000000510100000001000012737570706f727465642d76657273696f6e730803322e300e6d61782d6672616d652d73697a6503fcf0060c6361706162696c69746965730810706970656c696e696e672c6173796e63
NOTIFY=00000020030000000101010a726c2d72657175657374010674656e616e74080461636d65

# hold FIRST_HEX DRIP_HEX: a connection that sends FIRST_HEX at once, then
# DRIP_HEX a byte every 300 ms (up to 40 s), or nothing for 40 s when
# DRIP_HEX is empty; its pid in HOLD. The last probe (hello) closed its
# connection, but the agent frees the slot when it reads that close: a
# hold that came first was refused (seen under ASan), so it waits first.
hold() {
	sleep 0.5
	(
		trap '' PIPE
		exec 3<>"/dev/tcp/127.0.0.1/$AP" || exit 1
		[ -z "$1" ] || echo "$1" | xxd -r -p >&3 || exit 0
		[ -n "$2" ] || exec sleep 40
		for _ in $(seq 130); do
			for b in $(echo "$2" | sed 's/../& /g'); do
				sleep 0.3 3>&-
				printf "\\x$b" >&3 2>/dev/null || exit 0
			done
		done
	) &
	HOLD=$!
	PIDS="$PIDS $HOLD"
	sleep 0.3
}
# freed_within SECS: polls for a new connection's AGENT-HELLO; echoes the
# ms it took; returns 1 if the slot was not back within SECS.
freed_within() {
	local t0=$EPOCHREALTIME end=$((SECONDS + $1))
	until hello; do
		[ "$SECONDS" -lt "$end" ] || return 1
		sleep 0.2
	done
	awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) * 1000 }'
}

hello; ok $? "max_conns 1: a connection gets its AGENT-HELLO"

hold "" ""
! hello; ok $? "a silent connection holds the one slot"
ms=$(freed_within 12); ok $? "silent before its HELLO: the slot is back within 12 s (${ms:-no} ms; idle_timeout 30s)"
kill "$HOLD" 2>/dev/null

hold "" "$HELLO"
! hello; ok $? "a connection dripping its HELLO holds the one slot"
ms=$(freed_within 12); ok $? "dripping its HELLO a byte per 300 ms: the slot is back within 12 s (${ms:-no} ms)"
kill "$HOLD" 2>/dev/null

pol 1s >"$TMP/policy.yaml"
n=$(reloads); kill -HUP "$AGENT_PID"
until_ok 50 eval '[ "$(reloads)" -gt "$n" ]'; ok $? "reload to idle_timeout 1s"
hold "$HELLO" "$NOTIFY"
! hello; ok $? "a connection dripping a NOTIFY after its HELLO holds the one slot"
ms=$(freed_within 6); ok $? "dripping a NOTIFY: the slot is back within 6 s (${ms:-no} ms; idle_timeout 1s)"
kill "$HOLD" 2>/dev/null
kill -0 "$AGENT_PID"; ok $? "the agent is still running"
finish
