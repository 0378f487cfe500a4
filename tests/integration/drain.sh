#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Shutdown with connections that outlast the drain on every worker: SIGTERM
# starts the drain on all the workers at once, so the agent exits at one
# drain deadline (SERVER_DRAIN_S, 5 s), not one per worker in turn (each
# worker used to be woken only once the one before had been joined: N x 5 s,
# the later ones still serving meanwhile).
# Then a drain loses no NOTIFY HAProxy has sent (HAProxy 2.6 fails, and
# never resends, one left unanswered on a connection the agent closes):
# those waiting unread behind the in-flight cap at SIGTERM are read and
# answered before the DISCONNECT (reads used to stop at once), and new
# connections are refused at once instead of waiting in the backlog for a
# HELLO never answered.
#   The held connections: 48 of them, opened 50 ms apart so that each is
# a wakeup of its own and both workers take some (whichever accepts
# first: often 1 in 5 go to one of them; the suite checks both did), each
# with 16 NOTIFYs waiting on a stopped Redis (redis.timeout 10 s): in
# flight past the drain deadline. (A leaky bucket in delay mode no longer
# holds a connection that long: a drain sends held ACKs by its 4th s.)
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); BP=$(port 3)
CONNS=48
redis_agent_up 2 10s <<YAML
processing_timeout: 30s
rules:
  - name: slow
    message: rl-slow
    key: "slow:{tenant}"
    algorithm: gcra
    rate: 100/s
    burst: 100
    fail: open
YAML
ok $? "agent up"

eval "RPID=\$REDIS_PID_$RP"
kill -STOP "$RPID"
for k in $(seq $CONNS); do
	"$CLIENT" -a "127.0.0.1:$AP" -n 16 -P 16 -v -t 30000 rl-slow tenant=s:k$k \
		>"$TMP/held.$k" 2>&1 &
	PIDS="$PIDS $!"
	sleep 0.05	# one accept per wakeup: spread over the workers
done
sent() { cat "$TMP"/held.* | grep -c '^sent sid'; }
i=0
until [ "$(sent)" -eq $((CONNS * 16)) ] || [ $i -ge 100 ]; do sleep 0.05; i=$((i + 1)); done
expect_eq "$(sent)" $((CONNS * 16)) "$CONNS connections with 16 NOTIFYs each in flight"

t0=$EPOCHREALTIME
kill -TERM "$AGENT_PID"
wait "$AGENT_PID"
ms=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) * 1000 }')
echo "# $(grep -o "drain_timeout worker=[0-9]* conns=[0-9]*" "$TMP/agent.log" | tr "\n" " ")"
timeouts=$(sed -n 's/.*msg=drain_timeout worker=\([0-9]*\).*/\1/p' "$TMP/agent.log" | sort -u | tr '\n' ' ')
expect_eq "$timeouts" "0 1 " "both workers still held a connection at their drain deadline"
[ "$ms" -ge 4500 ] && [ "$ms" -lt 8000 ]
ok $? "the agent exits at one 5 s drain deadline, not one per worker (${ms} ms)"
kill -CONT "$RPID"

# Redis stopped: 64 NOTIFYs wait for it (the cap of one connection), 16
# more wait unread in the socket; SIGTERM; each Redis call times out after
# RT into fail: open. RT 500ms: the drain still reads when the 64 are
# answered; 1500ms: past its 1 s of reading, it stops, and the 16 it had
# read already are still answered (they were dropped).
capped_drain() {
RT=$1
cat >"$TMP/capped.yaml" <<YAML
listen: 127.0.0.1:$BP
workers: 1
redis: { url: "redis://127.0.0.1:$RP/0", timeout: $RT }
processing_timeout: 3s
rules:
  - name: t
    message: rl-t
    key: "t:{tenant}"
    algorithm: gcra
    rate: 100/s
    burst: 100
    fail: open
YAML
: >"$TMP/agent.log"
agent_up "$TMP/capped.yaml"
ok $? "$RT: an agent up"
eval "RPID=\$REDIS_PID_$RP"
kill -STOP "$RPID"
"$CLIENT" -a "127.0.0.1:$BP" -n 80 -P 80 -v -W -t 3000 rl-t tenant=s:a >"$TMP/capped" 2>&1 &
cpid=$!
until_ok 30 grep -q 'sent sid=1 fid=80' "$TMP/capped"
ok $? "$RT: 80 NOTIFYs sent on one connection"
sleep 0.1
kill -TERM "$AGENT_PID"
sleep 0.1
(exec 3<>"/dev/tcp/127.0.0.1/$BP") 2>/dev/null
ok $((! $?)) "$RT: draining, the agent refuses a new connection at once"
wait "$cpid"
grep -q '^sent=80 acked=80' "$TMP/capped"
ok $? "$RT: the 16 NOTIFYs unread at SIGTERM are answered too ($(grep '^sent=' "$TMP/capped"))"
grep -q 'disconnect status=0' "$TMP/capped"
ok $? "$RT: then the normal DISCONNECT"
wait "$AGENT_PID"
ok $? "$RT: and the agent exits cleanly"
kill -CONT "$RPID"
}
capped_drain 500ms
capped_drain 1500ms

# Past the 1 s of reading with NOTIFYs answered at once (a local rule):
# one waits on the stopped Redis, 149 more come 10 ms apart; the agent is
# stopped across its drain deadline, so that all of them wait unread.
# The DISCONNECT went as soon as the first read of them was answered
# inside its parse: the rest, read already, got no ACK (143 of 150).
cat >"$TMP/late.yaml" <<YAML
listen: 127.0.0.1:$BP
workers: 1
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 1s }
processing_timeout: 3s
rules:
  - { name: t, message: rl-t, key: "t:{tenant}", rate: 100/s, burst: 100, fail: open }
  - { name: l, message: rl-l, key: "l:{tenant}", rate: 100000/s, burst: 100000, store: local }
YAML
: >"$TMP/agent.log"
agent_up "$TMP/late.yaml"
ok $? "an agent with a local rule up"
kill -STOP "$RPID"
"$CLIENT" -a "127.0.0.1:$BP" -n 150 -P 150 -g 10 -v -M 1:rl-l -W -t 3000 \
	rl-t tenant=s:a >"$TMP/late" 2>&1 &
cpid=$!
sleep 0.5
kill -TERM "$AGENT_PID"
sleep 0.3
kill -STOP "$AGENT_PID"
sleep 1
kill -CONT "$AGENT_PID"
wait "$cpid"
grep -q '^sent=150 acked=150' "$TMP/late"
ok $? "every NOTIFY that came before the drain deadline is answered ($(grep '^sent=' "$TMP/late"))"
wait "$AGENT_PID"
ok $? "and the agent exits cleanly"
kill -CONT "$RPID"
finish
