#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A leaky bucket in delay mode that takes its rate from the tenant's plan
# (plan: rate) holds the ACK within max_delay, as the same rule with its
# own rate does. The per-plan limits were built from the plan alone and
# lost max_delay: every tenant got a meter, and the second of two
# back-to-back requests was refused (429) instead of held. Real Redis;
# what it does not cover: the plan lookup from Redis (plans.sh).
. "$(dirname "$0")/../lib.sh"
AP=$(port 1); RP=$(port 2)
redis_agent_up 1 20ms <<YAML || { ok 1 "the agent starts"; finish; }
plans:
  free: { rate: 20/s, burst: 1 }
plan_lookup: { default: free }
rules:
  - name: lb
    message: rl-request
    key: "lb:{tenant}"
    algorithm: leaky-bucket
    mode: delay
    max_delay: 70ms
    plan: rate
YAML
# two requests at once: the second waits one 50 ms interval (< 70 ms)
got=$("$CLIENT" -a "127.0.0.1:$AP" -n 2 rl-request tenant=s:acme |
	grep '^ack' | field status | tr '\n' ' ')
expect_eq "$got" "0 0 " "the second request is held, not refused"
finish
