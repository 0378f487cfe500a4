#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Redis Cluster whose node addresses change (a pod restarted with a new IP,
# a node moved): the agent forgets the nodes that left the map. One
# single-node cluster announces, one after another, 70 addresses where
# nothing listens (127.0.0.2 .. 127.0.0.71, the same port), then one that
# answers (127.0.0.200). The node table holds 64 nodes: before the agent
# forgot, the 64th new address filled it for good and the last one's slots
# stayed unmapped, every request on its fail mode until a restart.
. "$(dirname "$0")/../lib.sh"
P=$(port 1); BUS=$(port 11); AP=$(port 2)
mkdir -p "$TMP/c"
redis-server --port "$P" --bind 127.0.0.1 127.0.0.200 --save '' --appendonly no \
	--dir "$TMP/c" --cluster-enabled yes --cluster-config-file "$TMP/c/nodes.conf" \
	--cluster-port "$BUS" --daemonize no >"$TMP/c.log" 2>&1 &
PIDS="$PIDS $!"
wait_port "$P"
rc "$P" cluster addslotsrange 0 16383 >/dev/null
cluster_ok() { rc "$P" cluster info | grep -q 'cluster_state:ok'; }
until_ok 100 cluster_ok; ok $? "a single-node cluster serving every slot"

cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis+cluster://127.0.0.1:$P", timeout: 100ms }
processing_timeout: 1s
rules:
  - { name: t, message: rl-request, key: "{tenant}", rate: 1000000/s, burst: 1000000, fail: closed }
YAML
agent_up "$TMP/policy.yaml"
c() { "$CLIENT" -a "127.0.0.1:$AP" -t 1000 "$@"; }
decided() { [ "$(c rl-request tenant=s:a | field status)" = 0 ]; }
until_ok 100 decided; ok $? "decided by the cluster at its seed address" || finish

# each request routed to the dead address makes the agent reconnect, fail,
# and ask for the map again: it then meets the next address
announce() { rc "$P" config set cluster-announce-ip "$1" >/dev/null; }
met() {
	c rl-request tenant=s:a >/dev/null
	grep -q "msg=redis_connect_failed host=$1 " "$TMP/agent.log"
}
seen=0
for i in $(seq 2 71); do
	announce "127.0.0.$i"
	until_ok 100 met "127.0.0.$i" && seen=$((seen + 1))
done
expect_eq "$seen" 70 "the agent met each of the 70 dead addresses"
expect_eq "$(c rl-request tenant=s:a | field status)" 503 \
	"while the map names a dead node: fail: closed"

announce 127.0.0.200
until_ok 100 decided
ok $? "the 71st new address, a live one, serves every slot again"
grep -q 'msg=cluster_too_many_nodes' "$TMP/agent.log"
ok $((!$?)) "the node table never filled"
# a node is forgotten once it was sent nothing for a refresh period (5 s),
# at a refresh (every 5 s): all 70 within 10 s of the last request
forgotten() { grep -c 'msg=cluster_node_forgotten host=127.0.0.[0-9]* ' "$TMP/agent.log"; }
until_ok 120 eval '[ "$(forgotten)" -ge 70 ]'
ok $? "the 70 dead nodes were forgotten ($(forgotten))"
grep -q 'msg=cluster_node_forgotten host=127.0.0.1 ' "$TMP/agent.log"
ok $((!$?)) "the seed was kept"
links() { rc "$P" client list | grep -vc 'cmd=client'; }
expect_eq "$(links)" 2 "two links left: the seed's and the new address'"
finish
