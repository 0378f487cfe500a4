#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The server side of SPOP, on one agent with max_conns 5:
#   1. pipelining: 20 NOTIFYs in flight on one connection, with distinct
#      stream-ids and frame-ids; the first ones are held by a leaky bucket
#      in delay mode, so they are ACKed after later ones, each ACK with
#      its own NOTIFY's stream-id and frame-id;
#   2. HAPROXY-DISCONNECT (status 0, and 2 as on HAProxy's idle timeout)
#      is answered with AGENT-DISCONNECT status 0, then the agent closes;
#   3. the connection cap: past max_conns a connection is closed at once,
#      before any byte (no AGENT-HELLO: HAProxy sees an I/O error, 257),
#      and logged; the connections held go on being served, and once one
#      closes the next is accepted and served.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
MAX_CONNS=5
redis_agent_up 2 100ms <<YAML
max_conns: $MAX_CONNS
idle_timeout: 30s
processing_timeout: 2s
rules:
  - name: slow
    message: rl-slow
    key: "slow:{tenant}"
    algorithm: leaky-bucket
    mode: delay
    rate: 10/s
    burst: 1
    max_delay: 1s
    store: local
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    rate: 1000/s
    burst: 1000
YAML
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@"; }
ms_since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) * 1000 }'; }
# served LABEL TENANT: one NOTIFY on a new connection gets its ACK
served() {
	out=$(c rl-request tenant=s:"$2" 2>&1)
	echo "$out" | grep -q '^ack sid=1 fid=1 .*status=0'
	ok $? "$1"
}

# ---- 1. pipelining: ACKs in any order, stream-id and frame-id echoed -----------
# NOTIFY i has sid 101+2i and fid i+1. The first 5 are rl-slow (one slot
# every 100 ms: held 0, 100, ..., 400 ms), the other 15 rl-request,
# answered at once.
out=$(c -n 20 -P 20 -s 101 -I -v -M 5:rl-request -t 3000 rl-slow tenant=s:order)
sent=$(echo "$out" | sed -n 's/^sent sid=\([0-9]*\) fid=\([0-9]*\)$/\1 \2/p')
acks=$(echo "$out" | sed -n 's/^ack sid=\([0-9]*\) fid=\([0-9]*\) .*/\1 \2/p')
expect_eq "$(echo "$out" | grep '^sent=')" "sent=20 acked=20" "pipelining: 20 NOTIFYs in flight, 20 ACKs"
expect_eq "$(echo "$sent" | sort -u | wc -l)" 20 "pipelining: the 20 NOTIFYs have distinct stream-ids and frame-ids"
expect_eq "$(echo "$acks" | sort | tr '\n' ' ')" "$(echo "$sent" | sort | tr '\n' ' ')" \
	"pipelining: each ACK carries its own NOTIFY's stream-id and frame-id"
[ "$(echo "$acks" | tr '\n' ' ')" != "$(echo "$sent" | tr '\n' ' ')" ]
ok $? "pipelining: the ACKs came in another order than the NOTIFYs ($(echo "$acks" | awk '{ printf "%s ", $2 }'))"
pos() { echo "$acks" | awk -v f="$1" '$2 == f { print NR }'; }
[ "$(pos 5)" -gt "$(pos 20)" ] && [ "$(pos 2)" -gt "$(pos 20)" ]
ok $? "pipelining: the held NOTIFYs (fid 2-5) are ACKed after the last one sent (fid 20)"
expect_eq "$(echo "$out" | grep '^ack' | grep -c ' status=0')" 20 "pipelining: every NOTIFY is allowed"

# ---- 2. HAPROXY-DISCONNECT ------------------------------------------------------
out=$(c -D "0:normal"); rc=$?
echo "$out" | grep -q '^disconnect status=0 '; ok $? "HAPROXY-DISCONNECT 0 is answered with AGENT-DISCONNECT status 0"
echo "$out" | grep -q '^closed$'; ok $? "then the agent closes the connection"
expect_eq "$rc" 0 "spop-client -D: the DISCONNECT was answered and the connection closed"
grep -q 'msg=spop_disconnect peer=127.0.0.1:[0-9]* status=0 message="normal"' "$TMP/agent.log"
ok $? "the agent logs HAProxy's status and message"
out=$(c -D "2:idle timeout")
expect_eq "$(echo "$out" | tr '\n' '|' | sed 's/message=[^|]*//')" "hello version=2.0 max-frame-size=16380 capabilities=pipelining|disconnect status=0 |closed|" \
	"HAPROXY-DISCONNECT 2 (HAProxy's idle timeout) gets status 0, then the close"
out=$(c -n 3 -D "0:done" rl-request tenant=s:dis)
expect_eq "$(echo "$out" | grep -c '^ack')/$(echo "$out" | grep -c '^disconnect status=0 ')/$(echo "$out" | grep -c '^closed$')" "3/1/1" \
	"after NOTIFYs on the same connection too"

# ---- 3. the connection cap ------------------------------------------------------
# 5 holders: each sends a NOTIFY every 600 ms (8 in all, 4.2 s) and
# stays 1 s more: the refusals below must come while most of their
# NOTIFYs are still to come, even under ASan on a loaded machine (at
# 300 ms, 15 of 40 were ACKed by then in one such run).
holders=""
for i in 1 2 3 4 5; do
	"$CLIENT" -a "127.0.0.1:$AP" -n 8 -g 600 -W -t 1000 rl-request \
		tenant=s:hold$i >"$TMP/hold$i" 2>&1 &
	holders="$holders $!"
done
PIDS="$PIDS $holders"
i=0
until [ "$(cat "$TMP"/hold? | grep -c '^hello')" -eq 5 ] || [ $i -ge 100 ]; do
	sleep 0.05; i=$((i + 1))
done
expect_eq "$(cat "$TMP"/hold? | grep -c '^hello')" 5 "max_conns $MAX_CONNS: $MAX_CONNS connections get their AGENT-HELLO"
t0=$EPOCHREALTIME
out=$(c -t 3000 rl-request tenant=s:sixth 2>&1); rc=$?
ms=$(ms_since "$t0")
echo "$out" | grep -Eq '^no AGENT-HELLO: (eof|reset) after 0 bytes$' && [ "$rc" -ne 0 ]
ok $? "the $((MAX_CONNS + 1))th connection is closed without a byte, no AGENT-HELLO ($out)"
[ "$ms" -lt 1000 ]; ok $? "at once, not after a timeout (${ms} ms)"
grep -q "msg=conn_refused reason=max_conns max=$MAX_CONNS" "$TMP/agent.log"
ok $? "the refusal is logged (conn_refused reason=max_conns)"
for i in $(seq 10); do c -t 1000 rl-request tenant=s:more >/dev/null 2>&1; done
n=$(grep -c 'msg=conn_refused ' "$TMP/agent.log")
[ "$n" -le 2 ]; ok $? "10 more refusals log at most one line per worker (2) per 10 s (got $n)"
alive=0
for p in $holders; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
expect_eq "$alive" 5 "the $MAX_CONNS connections held were open during the refusal"
early=$(cat "$TMP"/hold? | grep -c '^ack')
[ "$early" -lt 20 ]; ok $? "most of their NOTIFYs are still to come ($early of 40 ACKed so far)"
set -- $holders
kill "$1"
wait "$1" 2>/dev/null
t0=$EPOCHREALTIME
for i in $(seq 40); do
	out=$(c rl-request tenant=s:next 2>&1) && break
	sleep 0.05
done
echo "$out" | grep -q '^ack sid=1 fid=1 .*status=0'
ok $? "once one closes, the next connection is accepted and served ($(ms_since "$t0") ms, $i tries)"
shift
for p in "$@"; do wait "$p"; done
for i in 2 3 4 5; do
	expect_eq "$(grep -c '^ack .* status=0' "$TMP/hold$i")" 8 \
		"holder $i: served all along, its 8 NOTIFYs ACKed"
done
grep -q 'disconnect' "$TMP"/hold?; ok $((1 - $?)) "no holder was disconnected"
served "with the holders gone, connections are served again" again
finish
