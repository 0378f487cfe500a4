#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# CONN_MAX_INFLIGHT (64) caps the requests of one connection, not only its
# reads: with Redis stopped, 400 small NOTIFYs pipelined at once on a
# connection (they fit in one 16 KB read) must not all become requests
# (12 KB each) waiting on Redis. Before, every whole frame already read was
# started: 400 requests per connection. spoa_rl_requests_in_flight shows
# them; all are answered once Redis is back.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); MP=$(port 3)
redis_agent_up 1 1500ms <<YAML
metrics: { listen: "127.0.0.1:$MP" }
processing_timeout: 3s
rules:
  - { name: t, message: rl-request, key: "t:{tenant}", rate: 100000/s, burst: 100000, fail: open }
YAML
inflight() { metric "$MP" spoa_rl_requests_in_flight; }
"$TOOLS/spop-client" -a "127.0.0.1:$AP" rl-request tenant=s:warm >/dev/null
expect_eq "$(inflight)" 0 "no request in flight at rest"
eval "rpid=\$REDIS_PID_$RP"
kill -STOP "$rpid"
CL=""
for i in 1 2; do
	"$TOOLS/spop-client" -a "127.0.0.1:$AP" -t 20000 -n 400 -P 400 rl-request \
		tenant=s:t$i >"$TMP/out$i" 2>&1 &
	CL="$CL $!"
done
sleep 0.7
expect_eq "$(inflight)" 128 "2 x 400 pipelined NOTIFYs, Redis stopped: 2 x 64 requests in flight"
kill -CONT "$rpid"
wait $CL
expect_eq "$(cat "$TMP/out1" "$TMP/out2" | grep -c '^ack')" 800 "all 800 answered"
expect_eq "$(inflight)" 0 "none left in flight"
finish
