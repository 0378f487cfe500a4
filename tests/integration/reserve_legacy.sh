#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Records in the older "<units>:<index>" form (an older agent of the pool,
# during a rolling upgrade) are still settled: gcra at the rule's rate,
# windows to their window.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
redis_agent_up 1 500ms <<YAML || { ok 1 "the agent starts"; finish; }
processing_timeout: 1s
rules:
  - { name: g, message: rl-g, key: "t:{tenant}", algorithm: gcra, rate: 1000/d, burst: 1000, reserve: "{max_tokens}", cost: "{cost}", lease: 1h, result_message: rl-g-res }
  - { name: f, message: rl-f, key: "t:{tenant}", algorithm: fixed-window, limit: 1000, window: 1d, reserve: "{max_tokens}", cost: "{cost}", lease: 1h, result_message: rl-f-res }
YAML
c() { timeout 10 "$CLIENT" -a "127.0.0.1:$AP" "$@" | grep '^ack'; }
for a in g f; do
	expect_eq "$(c rl-$a tenant=s:a id=s:x1 max_tokens=s:300 | field remaining)" 700 "$a: 300 reserved"
	v=$(rc "$RP" get "rl:{$a:t:a}:r:x1")
	if [ $a = g ]; then old=300:0; else old=$v; fi
	rc "$RP" set "rl:{$a:t:a}:r:x1" "$old" px 60000 >/dev/null
	c rl-$a-res tenant=s:a id=s:x1 status=i:200 cost=s:100 >/dev/null
	expect_eq "$(c rl-$a tenant=s:a id=s:p max_tokens=s:0 | field remaining)" 900 \
		"$a: the older record ($v as $old) settled: 200 back"
done
finish
