#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The agent sends the script's ARGV packed into one msgpack array
# (batch.h), the script's one input format (test_script runs every script
# test in it; a plain ARGV is refused): 200 pipelined requests, each with a
# sliding log of 30 (a member per check, packed as a string) and a GCRA
# burst of 50, are allowed exactly 30 times, and the denied ones are
# charged nowhere; Redis' MONITOR shows the packed calls, a request alone
# included.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
redis_agent_up 1 500ms <<YAML
processing_timeout: 1s
rules:
  - name: log
    message: rl-a
    key: "log:{tenant}"
    algorithm: sliding-log
    limit: 30
    window: 1h
  - name: g
    message: rl-a
    key: "g:{tenant}"
    algorithm: gcra
    rate: 1/hour
    burst: 50
YAML
redis-cli -p "$RP" monitor >"$TMP/monitor" 2>&1 &
mon=$!
PIDS="$PIDS $mon"
sleep 0.2

out=$("$CLIENT" -a "127.0.0.1:$AP" -n 200 -P 20 rl-a tenant=s:acme)
expect_eq "$(echo "$out" | grep -c '^ack.* status=0 ')" 30 \
	"200 pipelined requests: exactly the log's 30 allowed"
expect_eq "$(echo "$out" | grep -c '^ack.* status=429 ')" 170 "the other 170 denied"
expect_eq "$(rc "$RP" zcard 'rl:{log:log:acme}')" 30 "the log holds 30 members"
# GCRA charged only for the 30 allowed: 20 of its burst of 50 left
expect_eq "$("$CLIENT" -a "127.0.0.1:$AP" rl-a tenant=s:acme | sed -n 's/.*"g";r=\([0-9]*\).*/\1/p')" 20 \
	"the GCRA rule was charged for the 30 allowed only (r=20)"
"$CLIENT" -a "127.0.0.1:$AP" rl-a tenant=s:solo >/dev/null
sleep 0.3
kill "$mon" 2>/dev/null
# a packed ARGV is one string starting with msgpack's array16 marker (a
# batch of 2 or more checks, and, since the rule tuple has 7 fields
# (limiter.h: the penalty box's two and the reservation lease), a lone
# request of these 2 checks: 2 + 2 tuples of 7 + its count, 2 codes and a
# member = 20 items)
packed=$(grep '"FCALL"' "$TMP/monitor" | grep -c '"\\xdc')
[ "$packed" -ge 1 ]
ok $? "packed calls were made ($packed)"
grep '"FCALL"' "$TMP/monitor" | grep 'solo' | grep -q '"\\xdc\\x00\\x14'
ok $? "a request alone goes packed too (one array of 20 items)"
# the decimal ARGV of old Cluster batches is not a format any more
out=$(rc "$RP" eval "$(cat "$ROOT/agent/store/lua/ratelimit.lua")" 1 'rl:{g:g:plain}' \
	1 1 0 1000 1000000 0 1 16 2>&1)
echo "$out" | grep -q 'ERR'
ok $? "a plain decimal ARGV is refused by the script ($(echo "$out" | head -c 60))"
expect_eq "$(rc "$RP" exists 'rl:{g:g:plain}')" 0 "and charges nothing"
finish
