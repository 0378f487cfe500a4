#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A Redis reply that came before its request's deadline decides the
# request, even when the worker's loop wakes late (a busy worker, a
# stopped process) and finds the reply and the passed deadline in the same
# turn. libev runs the timers of a turn before its reads, so the deadline
# gave the request its fail mode (degraded) over a reply already in the
# socket; the deadline timer now runs after the turn's reads.
#
# Redis is held with CLIENT PAUSE so that the call waits in it; the agent
# is stopped before the deadline, Redis answers while it is stopped, and
# the agent resumes past the deadline.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
redis_agent_up 1 300ms <<YAML
processing_timeout: 5s
rules:
  - { name: tenant, message: rl-request, key: "t:{tenant}", rate: 100/s, fail: open }
YAML
ask() { "$TOOLS/spop-client" -a "127.0.0.1:$AP" rl-request "tenant=s:$1"; }
expect_eq "$(ask warm | field degraded)" 0 "a request is decided by Redis"
rc "$RP" client pause 800 all >/dev/null & spid=$!
sleep 0.1
expect_eq "$(ask held | field degraded)" 1 "a call Redis holds past the deadline gets its fail mode (degraded)"
wait "$spid"

for round in 1 2 3; do
	rc "$RP" client pause 800 all >/dev/null &	# t=0: Redis holds every call until t=0.8
	spid=$!
	sleep 0.1
	ask "r$round" >"$TMP/ack$round" &		# t=0.1: the call waits, its deadline at t=0.4
	cpid=$!
	sleep 0.15
	kill -STOP "$AGENT_PID"				# t=0.25: before the deadline
	sleep 0.95
	kill -CONT "$AGENT_PID"				# t=1.2: the reply (t=0.8) and the deadline both due
	wait "$cpid" "$spid"
	expect_eq "$(field status <"$TMP/ack$round")/$(field degraded <"$TMP/ack$round")" 0/0 \
		"round $round: the reply that came while the agent was stopped decides (not fail: open, degraded)"
done
kill -0 "$AGENT_PID"; ok $? "the agent is still running"
finish
