#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# spop_disconnect lines are rate-limited like spop_error ones: each
# HAPROXY-DISCONNECT logged one info line, so a peer that connects, says
# HELLO and DISCONNECT, and does it again in a loop got one line per
# connection. Now each worker logs it at most once per status per 10 s,
# the next line saying how many it left out (suppressed=N);
# spoa_rl_spop_frames_total{type="disconnect"} counts every one.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); MP=$(port 3)
redis_agent_up 1 50ms -m "127.0.0.1:$MP" <<YAML
rules:
  - { name: t, message: rl-request, key: "t:{tenant}", rate: 1000/s, burst: 1000 }
YAML
ok $? "agent up"
bye() { "$CLIENT" -a "127.0.0.1:$AP" -t 1000 -D "0:bye" >/dev/null 2>&1; }
for _ in $(seq 100); do bye; done
expect_eq "$(metric "$MP" 'spoa_rl_spop_frames_total{type="disconnect"}')" 100 \
	"100 connections closed by the peer's DISCONNECT, all counted"
expect_eq "$(grep -c 'msg=spop_disconnect' "$TMP/agent.log")" 1 "one spop_disconnect line for them"
grep -q 'msg=spop_disconnect peer=127.0.0.1:[0-9]* status=0 message="bye" suppressed=0' "$TMP/agent.log"
ok $? "with the peer's status and words ($(grep -o 'msg=spop_disconnect.*' "$TMP/agent.log"))"
"$CLIENT" -a "127.0.0.1:$AP" -t 1000 -D "2:idle timeout" >/dev/null 2>&1
until_ok 20 eval '[ "$(grep -c msg=spop_disconnect "$TMP/agent.log")" -eq 2 ]'
ok $? "another status has a line of its own"
sleep 10.2
bye
until_ok 20 eval '[ "$(grep -c msg=spop_disconnect "$TMP/agent.log")" -eq 3 ]'
ok $? "the next status-0 one, 10 s later, is logged"
expect_eq "$(grep 'msg=spop_disconnect .*status=0' "$TMP/agent.log" | tail -n 1 | field suppressed)" 99 \
	"with the count of those left out (suppressed=99)"
finish
