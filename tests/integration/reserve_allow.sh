#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A settle is applied whatever the other checks of its request say
# (limiter.h): an allow override set on the key between the reservation
# and its settle must not drop the settle, or the units reserved stay
# charged once the override is gone.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
redis_agent_up 1 200ms <<YAML
processing_timeout: 1s
rules:
  - { name: g, message: rl-g, key: "t:{tenant}", algorithm: gcra, rate: 1000/d, burst: 1000, reserve: "{max_tokens}", cost: "{cost}", lease: 1h, result_message: rl-g-res }
YAML
c() { timeout 10 "$CLIENT" -a "127.0.0.1:$AP" "$@" | grep '^ack'; }
expect_eq "$(c rl-g tenant=s:a id=s:x1 max_tokens=s:300 | field remaining)" 700 "300 reserved"
timeout 10 "$AGENT" override set -f "$TMP/policy.yaml" g tenant=a --allow >/dev/null
ok $? "an allow override for a"
sleep 1.2
c rl-g-res tenant=s:a id=s:x1 status=i:200 cost=s:0 >/dev/null
timeout 10 "$AGENT" override del -f "$TMP/policy.yaml" g tenant=a >/dev/null
ok $? "the override is lifted"
sleep 1.2
expect_eq "$(c rl-g tenant=s:a id=s:p max_tokens=s:0 | field remaining)" 1000 \
	"the settle of 0 gave the 300 back"
finish
