#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The agent's side of a close. Once it has queued its AGENT-DISCONNECT
# (here on its idle timeout, 1 s) it stops reading; a peer that keeps the
# socket open but never reads leaves that output unsent, and the socket,
# its fd and its max_conns slot used to be held for as long as the peer
# liked. The agent now closes it at its close deadline (CONN_CLOSE_S, 2 s)
# and goes on serving others.
#   The peer: spop-flood's slow mode sends 3,000 NOTIFYs and holds the
#   connection 15 s without reading. It comes over a unix socket, whose
#   send buffer is net.core.wmem_default (about 208 KiB): the ~550 KiB of
#   ACKs fill it and stay queued in the agent, under its 1 MiB output cap
#   (so this is not the overflow close). Over TCP loopback the kernel
#   grows the send buffer to 4 MiB, past that cap.
# Then a peer that shuts its write side after its NOTIFYs (a half-close)
# still gets their ACKs: they were dropped with the connection at its EOF.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); MP=$(port 3)
SOCK="$TMP/agent.sock"
FLOOD="$TOOLS/spop-flood"
IDLE_S=1
CLOSE_S=2
HOLD_S=15
start_redis "$RP"
cat >"$TMP/policy.yaml" <<YAML
listen: unix:$SOCK
workers: 1
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms }
processing_timeout: 1s
idle_timeout: ${IDLE_S}s
rules:
  - name: tenant
    message: rl-request
    key: "t:{tenant}"
    algorithm: gcra
    rate: 100000/s
    burst: 100000
    store: local
  - name: slow
    message: rl-slow
    key: "s:{tenant}"
    algorithm: gcra
    rate: 100/s
    burst: 100
    fail: open
YAML
agent_up "$TMP/policy.yaml" -m "127.0.0.1:$MP"
ok $? "agent up"
ms_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) * 1000 }'; }

"$FLOOD" -a "unix:$SOCK" -t 30 notify -s -n 3000 -H "$HOLD_S" >"$TMP/slow" 2>&1 &
sp=$!
PIDS="$PIDS $sp"
i=0
until grep -q '^slow' "$TMP/slow" || [ $i -ge 100 ]; do sleep 0.1; i=$((i + 1)); done
t0=$EPOCHREALTIME
echo "# a peer that never reads: $(cat "$TMP/slow")"
expect_eq "$(metric "$MP" spoa_rl_spop_connections)" 1 "the peer that never reads is connected"

# Closed by the idle timeout plus the close deadline, with a margin: well
# before the peer would let go (HOLD_S).
bound=$(((IDLE_S + CLOSE_S + 3) * 1000))
until [ "$(metric "$MP" spoa_rl_spop_connections)" -eq 0 ] || [ "$(ms_since "$t0")" -ge $bound ]; do
	sleep 0.1
done
ms=$(ms_since "$t0")
[ "$(metric "$MP" spoa_rl_spop_connections)" -eq 0 ] && [ "$ms" -lt $bound ]
ok $? "the agent closes it within ${IDLE_S} s idle + ${CLOSE_S} s close deadline (${ms} ms, bound ${bound} ms)"
grep -q 'msg=conn_close_timeout' "$TMP/agent.log"
ok $? "at its close deadline, its output unsent (conn_close_timeout logged)"
! grep -q 'msg=conn_overflow' "$TMP/agent.log"
ok $? "not by the output cap (no conn_overflow)"
kill -0 "$sp" 2>/dev/null
ok $? "the peer still held its end when the agent closed"

out=$("$CLIENT" -a "unix:$SOCK" rl-request tenant=s:after)
echo "$out" | grep -q '^ack sid=1 fid=1 .*status=0'
ok $? "the agent still serves a normal request ($(echo "$out" | grep '^ack' | head -c 80))"
kill "$sp" 2>/dev/null
wait "$sp" 2>/dev/null

# Redis stopped: the 5 NOTIFYs wait for it (then its 100 ms timeout gives
# fail: open) while the client has already shut its write side.
eval "RPID=\$REDIS_PID_$RP"
kill -STOP "$RPID"
out=$("$CLIENT" -a "unix:$SOCK" -S -n 5 -P 5 -v -t 3000 rl-slow tenant=s:half 2>&1)
kill -CONT "$RPID"
echo "$out" | grep -q '^sent=5 acked=5'
ok $? "a half-closed peer gets the ACKs of the NOTIFYs it sent ($(echo "$out" | grep -e '^sent=' -e 'ACKs'))"
no_conns() { [ "$(metric "$MP" spoa_rl_spop_connections)" -eq 0 ]; }
until_ok 30 no_conns
ok $? "and the connection closes after the last"

# 3000 NOTIFYs answered at once, their ACKs left unread until the
# half-close: some still wait in the agent's output at its EOF, with
# nothing in flight; they were dropped with the connection. The NOTIFYs go
# in one write, which the socket's buffer takes whole: a peer writing them
# one by one without reading would block once the agent, its output past
# 64 KiB, stops reading it (output_backpressure.sh), and be dropped idle.
out=$(python3 "$(dirname "$0")/spop_peer.py" half-close "$SOCK" 3000 5 2>&1)
echo "$out" | grep -q '^acks=3000 out_of_order=0 other_frames=0'
ok $? "a half-closed peer gets the ACKs still unwritten at its EOF ($out)"
until_ok 30 no_conns
ok $? "and that connection closes too"
finish
