#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# CONN_MAX_INFLIGHT (64) caps the requests of one connection, not only its
# reads: with Redis stopped, 400 small NOTIFYs pipelined at once on a
# connection (they fit in one 16 KB read) must not all become requests
# (12 KB each) waiting on Redis. Before, every whole frame already read was
# started: 400 requests per connection. spoa_rl_requests_in_flight shows
# them; all are answered once Redis is back.
# max_inflight caps the requests of a worker across its connections (the
# memory of max_conns x 64 requests): set to 100 by a reload, 4 x 400
# pipelined NOTIFYs with Redis stopped make 100 requests, not 4 x 64; the
# connections wait unread (spoa_rl_inflight_full_total) and every NOTIFY is
# answered once Redis is back.
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
# flood N NAME: Redis stopped, N connections of 400 pipelined NOTIFYs each
# (tenant NAME1..NAMEn, output in $TMP/NAME1..), given 0.7 s to arrive.
flood() {
	kill -STOP "$rpid"
	CL=""
	for i in $(seq "$1"); do
		"$TOOLS/spop-client" -a "127.0.0.1:$AP" -t 20000 -n 400 -P 400 \
			rl-request tenant=s:$2$i >"$TMP/$2$i" 2>&1 &
		CL="$CL $!"
	done
	sleep 0.7
}
flood 2 out
expect_eq "$(inflight)" 128 "2 x 400 pipelined NOTIFYs, Redis stopped: 2 x 64 requests in flight"
kill -CONT "$rpid"
wait $CL
expect_eq "$(cat "$TMP/out1" "$TMP/out2" | grep -c '^ack')" 800 "all 800 answered"
expect_eq "$(inflight)" 0 "none left in flight"

sed -i 's/^processing_timeout: 3s$/processing_timeout: 3s\nmax_inflight: 100/' "$TMP/policy.yaml"
n=$(grep -c 'msg=reloaded' "$TMP/agent.log")
kill -HUP "$AGENT_PID"
until_ok 50 eval '[ "$(grep -c "msg=reloaded" "$TMP/agent.log")" -gt "$n" ]'
ok $? "reload to max_inflight: 100"
flood 4 cap
expect_eq "$(inflight)" 100 "4 x 400 pipelined NOTIFYs, Redis stopped: max_inflight (100) requests in flight"
[ "$(metric "$MP" spoa_rl_inflight_full_total)" -ge 1 ]
ok $? "a connection waited for room (spoa_rl_inflight_full_total)"
grep -q 'level=warn msg=inflight_full max_inflight=100 ' "$TMP/agent.log"
ok $? "and the agent says so"
kill -CONT "$rpid"
wait $CL
expect_eq "$(cat "$TMP"/cap[1-4] | grep -c '^ack')" 1600 "all 1600 answered"
expect_eq "$(inflight)" 0 "none left in flight"
finish
