# SPDX-License-Identifier: Apache-2.0
# The agent on redis+sentinel:// when the first sentinel of the URL is
# stale (it still names a replica as the master) and another one is
# right. ROLE refuses the replica, and the next discovery must ask
# another sentinel: asking the one that was just wrong again, over its
# open connection, kept the agent on its fail modes for as long as that
# sentinel stayed stale, with a good sentinel in the URL.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../e2e/lib-topo.bash"	# master_replica_up, start_sentinel
M=$(port 1); R=$(port 2); S1=$(port 3); S2=$(port 4); AP=$(port 5)

master_replica_up "$M" "$R"

# A sentinel that takes the replica for mymaster, and a good one;
# down-after is far beyond the test (no failover of their own).
NOFAILOVER='sentinel down-after-milliseconds mymaster 60000'
start_sentinel "$S1" "$R" mymaster "$NOFAILOVER"
start_sentinel "$S2" "$M" mymaster "$NOFAILOVER"
expect_eq "$(rc "$S1" sentinel get-master-addr-by-name mymaster | tr '\n' ' ')" \
	"127.0.0.1 $R " "the first sentinel gives the replica's address"
expect_eq "$(rc "$S2" sentinel get-master-addr-by-name mymaster | tr '\n' ' ')" \
	"127.0.0.1 $M " "the second one gives the master's"

cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis+sentinel://127.0.0.1:$S1,127.0.0.1:$S2/mymaster", timeout: 100ms }
processing_timeout: 1s
rules:
  - { name: login, message: rl-login, key: "login:{user}", rate: 10/min, burst: 1000, fail: closed }
YAML
agent_up "$TMP/policy.yaml"

# healthy KEY: a decision by Redis (allowed, not degraded)
healthy() {
	[ "$("$CLIENT" -a "127.0.0.1:$AP" rl-login user=s:"$1" | field degraded)" = 0 ]
}
t0=$(now_ms); n=0
while [ $n -lt 100 ]; do
	n=$((n + 1))
	healthy "u$n" && break
	sleep 0.05
done
ms=$(($(now_ms) - t0))
[ $n -lt 100 ]; ok $? "decisions come from the master the second sentinel names (${ms} ms)"
[ "$ms" -lt 4000 ]; ok $? "within 4 s, a few backoff steps (${ms} ms)"
expect_eq "$(rc "$M" exists "rl:{login:login:u$n}")" 1 "the key is on the master"
expect_eq "$(rc "$S1" sentinel get-master-addr-by-name mymaster | tr '\n' ' ')" \
	"127.0.0.1 $R " "the first sentinel still gave the replica all along"
finish
