#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# BUG: a link whose calls had never been answered was taken for stuck at
# the first deadline. Stall detection counts the silence from the link's
# last reply (LINK_STALL_S, 1 s), but the replies to the link's own set-up
# (SCRIPT LOAD, FUNCTION LOAD) were not counted as replies: right after a
# start or a reconnect, a Redis that paused 50 ms (a fork, a slow command)
# under the first requests opened the breaker and dropped the link after
# that much silence ("redis_link_dropped ... silent_ms=51"), and every
# request then went to its fail mode for the breaker's cooldown.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
start_redis "$RP" --enable-debug-command yes
ok $? "redis-server up on $RP"
cat >"$TMP/p.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis://127.0.0.1:$RP", timeout: 50ms }
rules:
  - { name: t, message: rl-request, key: "t:{tenant}", rate: 1000/s, burst: 1000, fail: closed }
YAML
start_agent "$TMP/p.yaml"
wait_port "$AP"
until_ok 30 grep -q redis_connected "$TMP/agent.log"
ok $? "the agent is connected; no call answered yet"
sleep 0.3	# the set-up answered

# statuses N: "count*status/degraded" of N pipelined requests
statuses() {
	"$CLIENT" -a "127.0.0.1:$AP" -n "$1" -P 20 rl-request tenant=s:acme |
		grep '^ack' | sed 's/.* status=\([0-9]*\).* degraded=\([0-9]*\).*/\1\/\2/' |
		sort | uniq -c | awk '{ printf "%s*%s ", $1, $2 }'
}
rc "$RP" debug sleep 0.3 >/dev/null &
dpid=$!
sleep 0.05
expect_eq "$(statuses 40)" "40*503/1 " "Redis paused 0.3 s: the 40 requests past their deadline fail closed"
wait "$dpid"
expect_eq "$(statuses 1)" "1*0/0 " "the pause over: decided by Redis at once"
! grep -q 'redis_breaker_open\|redis_link_dropped' "$TMP/agent.log"
ok $? "a pause shorter than LINK_STALL_S neither opened the breaker nor dropped the link"
expect_eq "$(grep -c redis_connected "$TMP/agent.log")" 1 "one connection all along"
finish
