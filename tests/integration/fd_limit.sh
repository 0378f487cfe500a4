#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Out of file descriptors: the agent runs with a small open-files limit
# (ulimit -n 64) and 100 connections arrive at once. accept4() fails with
# EMFILE while the listener stays readable; the agent must pause
# accepting, not spin a core and write a log line per attempt, and serve
# again once connections go. The same for its metrics listener, whose
# pause ended in a spin from the second one on (a one-shot libev timer
# started again without its delay set fires at once).
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); MP=$(port 3)
FLOOD="$TOOLS/spop-flood"

start_redis "$RP"
cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 2
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 50ms }
rules:
  - name: tenant
    message: rl-request
    key: "t:{tenant}"
    rate: 100/s
    burst: 100
YAML
( ulimit -n 64 && exec "$AGENT" -f "$TMP/policy.yaml" -m "127.0.0.1:$MP" ) \
	>>"$TMP/agent.log" 2>&1 &
AGENT_PID=$!
PIDS="$PIDS $AGENT_PID"
wait_port "$AP" && wait_port "$MP"
ok $? "agent up with ulimit -n 64"

# cpu_ticks: the agent's user+system time so far, in clock ticks
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$AGENT_PID/stat"; }
HZ=$(getconf CLK_TCK)

c0=$(cpu_ticks)
t0=$(now_ms)
"$FLOOD" -a "127.0.0.1:$AP" -t 4 conns -n 100 -H 3 >"$TMP/flood" 2>&1 &
fpid=$!
# while the flood holds every descriptor: three metrics connections, held
# past the metrics listener's first pause (1 s) and its retry
sleep 0.5
for i in 1 2 3; do
	( exec 3<>"/dev/tcp/127.0.0.1/$MP" && sleep 3 ) 2>/dev/null &
done
wait "$fpid"
t1=$(now_ms)
c1=$(cpu_ticks)
cat "$TMP/flood"
ready=$(sed -n 's/^ready conns=\([0-9]*\).*/\1/p' "$TMP/flood")
[ "${ready:-0}" -gt 0 ] && [ "${ready:-0}" -lt 100 ]
ok $? "some connections served, not all: the fd limit was hit (ready=$ready)"
grep -q 'msg=accept_paused error="Too many open files"' "$TMP/agent.log"
ok $? "the agent says it paused accepting, and why"
grep -q 'msg=httpd_accept_failed error="Too many open files"' "$TMP/agent.log"
ok $? "and the metrics server too"
cpu_ms=$(( (c1 - c0) * 1000 / HZ ))
wall_ms=$((t1 - t0))
echo "# agent CPU ${cpu_ms} ms over ${wall_ms} ms of the flood"
[ $((cpu_ms * 4)) -lt "$wall_ms" ]
ok $? "no spin: agent CPU ${cpu_ms} ms < a quarter of ${wall_ms} ms"
lines=$(grep -c 'msg=accept_paused' "$TMP/agent.log")
[ "$lines" -le 2 ]
ok $? "the log is not flooded ($lines accept_paused lines, one per worker per 10 s)"
lines=$(grep -c 'msg=httpd_accept_failed' "$TMP/agent.log")
[ "$lines" -le 6 ]
ok $? "nor by the metrics server ($lines lines, one per pause of 1 s)"
curl -sf --max-time 5 "http://127.0.0.1:$MP/metrics" >/dev/null
ok $? "the metrics server answers again"

sleep 0.5
out=$("$CLIENT" -a "127.0.0.1:$AP" rl-request tenant=s:after)
echo "$out" | grep -q '^ack .* status=0'
ok $? "once the connections are gone the agent serves again"
kill -0 "$AGENT_PID"
ok $? "the agent is alive"
finish
