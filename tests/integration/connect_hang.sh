#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A Redis whose connect hangs (SYNs dropped: a firewalled or dead host)
# for longer than redis.timeout. The requests that arrive meanwhile wait
# for the connect, their deadline passes, and they are answered by their
# fail mode. They used to stay linked in the store's queue after their
# answer, so the next request reusing the same memory closed the queue
# into a cycle: at the connect timeout the worker spun forever at 100 %
# CPU, answered nothing more, and SIGTERM could not stop the agent.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
"$TOOLS/blackhole" "$RP" 30 >"$TMP/blackhole.out" 2>&1 &
PIDS="$PIDS $!"
for _ in $(seq 50); do grep -q ready "$TMP/blackhole.out" && break; sleep 0.1; done
cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 5ms }
rules:
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    rate: 5/min
    burst: 5
    fail: open
YAML
agent_up "$TMP/policy.yaml"
apid=$AGENT_PID

# three requests one after the other, while the first connect hangs
acks=0
for n in 1 2 3; do
	"$CLIENT" -a "127.0.0.1:$AP" -t 1000 rl-request tenant=s:acme |
		grep -q '^ack.*status=0.*degraded=1' && acks=$((acks + 1))
done
expect_eq "$acks" 3 "while the connect hangs: each request answered by its fail mode"
sleep 1.5		# past the 1 s connect timeout: the queue is failed
"$CLIENT" -a "127.0.0.1:$AP" -t 1000 rl-request tenant=s:acme | grep -q '^ack'
ok $? "after the connect timeout: the worker still answers"
cpu0=$(awk '{print $14 + $15}' "/proc/$apid/stat")
sleep 1
cpu1=$(awk '{print $14 + $15}' "/proc/$apid/stat")
[ $((cpu1 - cpu0)) -lt $(($(getconf CLK_TCK) / 2)) ]
ok $? "the agent is idle, not spinning ($((cpu1 - cpu0)) ticks in 1 s)"
kill "$apid"
stopped=1
for _ in $(seq 80); do kill -0 "$apid" 2>/dev/null || { stopped=0; break; }; sleep 0.1; done
ok $stopped "SIGTERM stops the agent"
finish
