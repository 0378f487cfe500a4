#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# spop_error lines are rate-limited like the other lines a peer can cause
# (conn_refused, accept_paused): each connection closed for a protocol
# error logged one warn line, so anything that can reach the SPOP port
# (a port scanner, an HTTP health check aimed at it, a client in a loop)
# got one line per connection, thousands a second. Now each worker logs
# it at most once per status per 10 s, the next line saying how many it
# left out (suppressed=N); spoa_rl_spop_errors_total counts every one.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); MP=$(port 3)
redis_agent_up 1 50ms -m "127.0.0.1:$MP" <<YAML
rules:
  - { name: t, message: rl-request, key: "t:{tenant}", rate: 1000/s, burst: 1000 }
YAML
ok $? "agent up"
# "GET / HTTP/1.1\r\n" where a HELLO should be
bad() { "$CLIENT" -a "127.0.0.1:$AP" -t 1000 -R -x 474554202f20485454502f312e310d0a >/dev/null 2>&1; }
for _ in $(seq 100); do bad; done
status=$(sed -n 's/.*msg=spop_error .* status=\([0-9]*\) .*/\1/p' "$TMP/agent.log" | head -n 1)
expect_eq "$(metric "$MP" "spoa_rl_spop_errors_total{status=\"$status\"}")" 100 \
	"100 connections closed for a protocol error (status $status), all counted"
expect_eq "$(grep -c 'msg=spop_error' "$TMP/agent.log")" 1 "one spop_error line for them"
sleep 10.2
bad
until_ok 20 eval '[ "$(grep -c msg=spop_error "$TMP/agent.log")" -eq 2 ]'
ok $? "the next one, 10 s later, is logged"
expect_eq "$(grep 'msg=spop_error' "$TMP/agent.log" | tail -n 1 | field suppressed)" 99 \
	"with the count of those left out (suppressed=99)"
finish
