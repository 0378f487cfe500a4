#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Output backpressure. A peer that keeps sending NOTIFYs but never reads
# its ACKs made the agent buffer up to CONN_WBUF_MAX (1 MiB) of output per
# connection before cutting it off: 40 such peers added 38.6 MiB of RSS.
# Now a connection with more than 64 KiB unsent is no longer read (its
# NOTIFYs wait in the kernel; TCP pushes back on the peer) until the peer
# takes its output below 16 KiB.
#   (a) 20 peers send NOTIFYs (after their HELLO) for as long as the
#       socket takes them and never read: the agent's peak RSS (VmHWM)
#       grows by far less than 20 x 1 MiB, and the idle timeout (here
#       4 s) plus the close deadline (2 s) still drops them.
#   (b) A slow reader: 20,000 NOTIFYs (about 3.7 MiB of ACKs, well past
#       the old 1 MiB cut-off) sent while it reads nothing for 1.5 s, then
#       its ACKs read in small bites: every one arrives, once, in the order
#       sent (stream-ids 1..20000).
# Over a unix socket, whose send buffer (net.core.wmem_default, about
# 208 KiB) holds far less than TCP loopback's (up to 4 MiB), so the
# agent's own buffering shows and the suite stays short.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); MP=$(port 3)
SOCK="$TMP/agent.sock"
PEERS=20
N=20000
start_redis "$RP"
cat >"$TMP/policy.yaml" <<YAML
listen: unix:$SOCK
workers: 1
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms }
processing_timeout: 1s
idle_timeout: 4s
rules:
  - name: tenant
    message: rl-request
    key: "t:{tenant}"
    algorithm: gcra
    rate: 1000000/s
    burst: 1000000
    store: local
YAML
agent_up "$TMP/policy.yaml" -m "127.0.0.1:$MP"
ok $? "agent up" || finish

PEER="$(dirname "$0")/spop_peer.py"

kb() { awk -v k="$1:" '$1 == k { print $2 }' "/proc/$AGENT_PID/status"; }
out=$("$CLIENT" -a "unix:$SOCK" rl-request tenant=s:warm)
echo "$out" | grep -q '^ack sid=1 fid=1 .*status=0'
ok $? "warm-up request answered"
hwm0=$(kb VmHWM); rss0=$(kb VmRSS)
echo "# before: VmRSS $rss0 kB, VmHWM $hwm0 kB"

# ---- (a) peers that never read ------------------------------------------
python3 "$PEER" never-read "$SOCK" "$PEERS" 30 >"$TMP/never" 2>&1 &
np=$!
PIDS="$PIDS $np"
i=0
until grep -q '^stalled' "$TMP/never" || [ $i -ge 400 ]; do sleep 0.1; i=$((i + 1)); done
t0=$EPOCHREALTIME
rss1=$(kb VmRSS); hwm1=$(kb VmHWM)
grow=$((hwm1 - hwm0))
echo "# $PEERS peers that never read: $(cat "$TMP/never"); VmRSS $rss1 kB, VmHWM $hwm1 kB (+$grow kB)"
bound=$((PEERS * 256))
[ "$grow" -lt "$bound" ]
ok $? "$PEERS peers that never read add $grow kB to the peak RSS (< $bound kB; 1 MiB each before)"
! grep -q 'msg=conn_overflow' "$TMP/agent.log"
ok $? "none reached the output cap (no conn_overflow)"
expect_eq "$(metric "$MP" spoa_rl_spop_connections)" "$PEERS" "all $PEERS are still connected, not read"
out=$("$CLIENT" -a "unix:$SOCK" rl-request tenant=s:other)
echo "$out" | grep -q '^ack sid=1 fid=1 .*status=0'
ok $? "meanwhile another connection is served"
# idle timeout 4 s from their last frame read, close deadline 2 s, margin
no_conns() { [ "$(metric "$MP" spoa_rl_spop_connections)" -eq 0 ]; }
until_ok 100 no_conns
ok $? "the agent drops them at idle timeout + close deadline ($(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s after they stalled)"
kill -0 "$np" 2>/dev/null
ok $? "while they still held their end"
grep -q 'msg=conn_close_timeout' "$TMP/agent.log"
ok $? "their output unsent at the close deadline (conn_close_timeout)"
kill "$np" 2>/dev/null
wait "$np" 2>/dev/null

# ---- (b) a slow reader ----------------------------------------------------
out=$(timeout 40 python3 "$PEER" slow-reader "$SOCK" "$N" 1.5 2>&1)
echo "# slow reader: $out"
echo "$out" | grep -q "^acks=$N out_of_order=0 other_frames=0 sender_done=1"
ok $? "a slow reader gets all $N ACKs, in stream-id order, and nothing else"
! grep -q 'msg=conn_overflow' "$TMP/agent.log"
ok $? "its connection was not cut off (no conn_overflow)"
echo "# after: VmRSS $(kb VmRSS) kB, VmHWM $(kb VmHWM) kB"
finish
