#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# BUG: a single Redis that stops under a flood was never left. A worker
# has at most 256 script calls out (store_single.c); at a few thousand
# NOTIFYs a second they are all out within a few hundred ms of the stop,
# each request timing out before Redis had been silent for 1 s (the
# stall's threshold), so none of them fed the breaker. From then on every
# request was refused at once by that cap: no deadline passed, nothing
# dropped the link, and it was kept for as long as TCP held (15 min
# against a dead host), the breaker closed (spoa_rl_redis_circuit_open 0)
# while every decision came from the fail mode. A refusal by the cap now
# counts as a timeout does: the breaker opens and the link is dropped.
# What this does not test: the stall of a slow Redis that still answers
# (redis_faults.sh, stall_fresh_link.sh).
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); MP=$(port 3)
redis_agent_up 1 50ms -m "127.0.0.1:$MP" <<YAML
rules:
  - { name: t, message: rl-request, key: "t:{tenant}", rate: 100000/s, burst: 100000, fail: open }
YAML
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@"; }
expect_eq "$(c rl-request tenant=s:warm | field degraded)" 0 "decided by Redis before the stop"
eval "rpid=\$REDIS_PID_$RP"
line=$(wc -l <"$TMP/agent.log")
kill -STOP "$rpid"
# 4 connections, a NOTIFY every ms on each, 64 in flight at most: 256
# calls out within about 100 ms, then 2.5 s more of requests
CL=""
for i in 1 2 3 4; do
	c -t 5000 -n 2500 -P 64 -g 1 rl-request tenant=s:flood$i \
		>"$TMP/flood$i" 2>&1 &
	CL="$CL $!"
done
wait $CL
expect_eq "$(cat "$TMP"/flood[1-4] | grep -c '^ack')" 10000 "every NOTIFY of the flood is answered"
expect_eq "$(cat "$TMP"/flood[1-4] | grep '^ack' | grep -vc ' degraded=1 ')" 0 \
	"all by the fail mode (degraded=1)"
tail -n "+$line" "$TMP/agent.log" | grep -q ' msg=redis_breaker_open '
ok $? "the breaker opened (redis_breaker_open)"
tail -n "+$line" "$TMP/agent.log" | grep -q ' msg=redis_link_dropped .* inflight=256 '
ok $? "the link stuck with its 256 calls was dropped (redis_link_dropped inflight=256)"
kill -CONT "$rpid"
until_ok 50 eval '[ "$(c rl-request tenant=s:back | field degraded)" = 0 ]'
ok $? "decided by Redis again once it answers"
expect_eq "$(metric "$MP" spoa_rl_redis_circuit_open)" 0 "the breaker closed again"
finish
