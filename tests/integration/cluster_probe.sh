#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Redis Cluster, plan_lookup.redis_hash on the node whose breaker opened:
# after the outage the plan HGETs of new tenants must not take the
# half-open probe (an HGET's answer does not close the breaker), or that
# node's keys stay on their fail mode while Redis is healthy. A known
# tenant (no HGET) and a stream of new ones (an HGET each) both get
# decisions again right after the cooldown.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../e2e/lib-topo.bash"
P1=$(port 1); P2=$(port 2); P3=$(port 3); AP=$(port 4)
start_cluster "$P1" "$P2" "$P3" "$(port 11)" "$(port 12)" "$(port 13)"
ok $? "3 masters, cluster_state ok"
X=$(slot_owner "$(keyslot plans)")
K=""
for i in $(seq 1 500); do
	[ "$(slot_owner "$(keyslot "rl:{r:k$i}")")" = "$X" ] && { K=k$i; break; }
done
[ -n "$K" ]; ok $? "the plans hash and the rule's key rl:{r:$K} both on :$X"
cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis+cluster://127.0.0.1:$P1,127.0.0.1:$P2,127.0.0.1:$P3", timeout: 100ms }
processing_timeout: 1s
plans:
  free: { rate: 1000000/s, burst: 1000000 }
  pro:  { rate: 1000000/s, burst: 1000000 }
plan_lookup: { redis_hash: plans, default: free, cache: 30s }
rules:
  - { name: r, message: rl-request, key: "$K", plan: rate, fail: closed }
YAML
agent_up "$TMP/policy.yaml"
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@"; }
healthy() { [ "$(c rl-request tenant=s:warm | field status)" = 0 ]; }
until_ok 100 healthy; ok $? "decisions from the cluster"
# trip: OOM on :X (an outage error) until its breaker opens, then healthy
# again and past the cooldown (BREAKER_COOLDOWN 0.5 s)
trip() {
	rc "$X" config set maxmemory 1 >/dev/null
	c -n 10 rl-request tenant=s:warm >/dev/null
	rc "$X" config set maxmemory 0 >/dev/null
	sleep 0.6
}
trip
grep -q 'msg=redis_breaker_open' "$TMP/agent.log"; ok $? "the OOM errors opened :$X's breaker"
expect_eq "$(c -n 30 -g 100 rl-request tenant=s:warm | field status | grep -c '^0$')" 30 \
	"after the cooldown, a known tenant every 100 ms: 30 of 30 decided"
trip
expect_eq "$(c -n 30 -g 100 -u rl-request tenant=s:nt | field status | grep -c '^0$')" 30 \
	"after the cooldown, a new tenant every 100 ms (an HGET each): 30 of 30 decided"
finish
