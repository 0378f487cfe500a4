#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# spoa_rl_local_keys counts the near-cache's keys, as its HELP text and
# docs/OPERATING.md say ("keys in the local tier and near-cache"): it
# counted the local tier only, so an agent denying from its near-cache
# (near_cache_hits_total rising) showed 0 keys. Each worker now counts
# its near-cache's live entries once a second, idle or not. A penalty
# box (block:) holds its key there for the block (an ordinary denial for
# 0.5 s at most, too short to see in a scrape for sure).
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); MP=$(port 3)
redis_agent_up 2 50ms -m "127.0.0.1:$MP" <<YAML
rules:
  - { name: t, message: rl-request, key: "t:{tenant}", rate: 1/min, burst: 1, block: 30s }
YAML
ok $? "agent up"
expect_eq "$(metric "$MP" spoa_rl_local_keys)" 0 "no key held yet"
# 300 ms apart: the block is held to its end once the worker watches
# the pool's resets (its first poll), 0.5 s before that
expect_eq "$("$CLIENT" -a "127.0.0.1:$AP" -n 6 -g 300 rl-request tenant=s:a | field status | tr '\n' ' ')" \
	"0 429 429 429 429 429 " "burst 1: allowed once, then blocked"
[ "$(metric "$MP" spoa_rl_near_cache_hits_total)" -ge 1 ]
ok $? "denied from the near-cache ($(metric "$MP" spoa_rl_near_cache_hits_total) hits)"
until_ok 30 eval '[ "$(metric "$MP" spoa_rl_local_keys)" -ge 1 ]'
ok $? "spoa_rl_local_keys counts the near-cache's key ($(metric "$MP" spoa_rl_local_keys))"
finish
