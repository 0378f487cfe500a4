#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A settle of a reservation the local tier holds (store: local) is applied
# whatever the other checks of its NOTIFY say (limiter.h, "Reserve, then
# settle"; OPERATING.md: "settled there either way"), as the script applies
# a Redis one. Here rl-res also carries the charge of a Redis rule with
# fail: closed; Redis, stopped (SIGSTOP), answers past redis.timeout, so
# that rule refuses the response: the local settle must still refund.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); MP=$(port 3)
redis_agent_up 1 100ms <<YAML || { ok 1 "the agent starts"; finish; }
processing_timeout: 1s
metrics: { listen: 127.0.0.1:$MP }
rules:
  - name: loc
    message: rl-req
    key: "t:{tenant}"
    algorithm: gcra
    rate: 1000/d
    burst: 1000
    store: local
    reserve: "{max_tokens}"
    cost: "{cost}"
    lease: 1h
    result_message: rl-res
  - name: rem
    message: rl-req
    key: "r:{tenant}"
    algorithm: gcra
    rate: 100000/d
    burst: 100000
    charge: response
    cost: "{cost}"
    result_message: rl-res
    fail: closed
YAML
c() { timeout 10 "$CLIENT" -a "127.0.0.1:$AP" "$@" | grep '^ack'; }
left() { c rl-req tenant=s:a id=s:peek$1 max_tokens=s:0 | field remaining; }
expect_eq "$(c rl-req tenant=s:a id=s:x1 max_tokens=s:300 | field remaining)" 700 \
	"the local tier holds a reservation of 300"
pid=$(eval echo "\$REDIS_PID_$RP")
kill -STOP "$pid"
out=$(c rl-res tenant=s:a id=s:x1 status=i:200 cost=s:0)
kill -CONT "$pid"
echo "$out" | grep -q '^ack'
ok $? "the settle is answered ($out)"
expect_eq "$(metric "$MP" 'spoa_rl_reserve_units_refunded_total{rule="loc"}')" 300 \
	"the metrics say 300 refunded"
expect_eq "$(left 1)" 1000 "the local tier gave the 300 back"
expect_eq "$(c rl-res tenant=s:a id=s:x1 status=i:200 cost=s:0 >/dev/null; left 2)" 1000 \
	"and a repeated settle changes nothing more"
finish
