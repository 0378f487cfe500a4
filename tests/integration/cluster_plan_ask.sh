#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The plan lookup (HGET plan_lookup.redis_hash) during a slot migration.
# While the hash's slot is MIGRATING on its master and the hash itself has
# been MIGRATEd to the IMPORTING node, the source answers -ASK: the client
# must send ASKING, then the HGET, to the importing node. The lookup
# followed neither ASK nor MOVED (a MOVED only asked for a map refresh): it
# failed, so every tenant not cached got its rules' fail mode (degraded,
# plan_lookup_failed) for the whole migration. Now both are followed, as
# for the script calls (cluster.sh).
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../e2e/lib-topo.bash"	# start_cluster, keyslot, slot_owner
P1=$(port 1); P2=$(port 2); P3=$(port 3); AP=$(port 4)
start_cluster "$P1" "$P2" "$P3" "$(port 11)" "$(port 12)" "$(port 13)"
ok $? "3 masters, cluster_state ok"
H='{plans}'	# the hash; its slot is migrated
S=$(keyslot "$H")
SRC=$(slot_owner "$S")
for p in $CLUSTER_PORTS; do [ "$p" != "$SRC" ] && DST=$p && break; done
src_id=$(rc "$SRC" cluster myid); dst_id=$(rc "$DST" cluster myid)
expect_eq "$(rc "$SRC" hset "$H" ask pro moved pro)" 2 "two tenants on plan pro in $H (slot $S on $SRC)"

rc "$DST" cluster setslot "$S" importing "$src_id" >/dev/null
rc "$SRC" cluster setslot "$S" migrating "$dst_id" >/dev/null
expect_eq "$(rc "$SRC" migrate 127.0.0.1 "$DST" "$H" 0 5000)" OK "MIGRATE moves $H to the importing node $DST"
r=$(redis-cli -h 127.0.0.1 -p "$SRC" hget "$H" ask 2>&1)
case $r in ASK*) ok 0 "the source answers the HGET with $r" ;; *) ok 1 "the source answers ASK (got '$r')" ;; esac

cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis+cluster://127.0.0.1:$P1", timeout: 500ms }
processing_timeout: 2s
plans:
  free: { rate: 1/min, burst: 1 }
  pro:  { rate: 1/min, burst: 3 }
plan_lookup: { arg: plan, redis_hash: "$H", default: free, cache: 30s }
rules:
  - { name: tenant, message: rl-request, key: "t:{tenant}", plan: rate, fail: open }
YAML
agent_up "$TMP/policy.yaml"
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@"; }
mapped() { grep -q 'msg=cluster_map' "$TMP/agent.log"; }
until_ok 100 mapped; ok $? "the agent has the slot map"
asks0=$(asking_calls "$DST")
# decided: the statuses, then the degraded flags, of requests ARGS...
decided() { o=$(c "$@"); echo "$(echo "$o" | field status | tr '\n' ' ')/$(echo "$o" | field degraded | tr '\n' ' ')"; }

# 1. ASK: the plan is found on the importing node
expect_eq "$(decided -n 4 rl-request tenant=s:ask)" "0 0 0 429 /0 0 0 0 " \
	"during the migration (ASK) the tenant gets its plan's burst of 3, not degraded"
asks1=$(asking_calls "$DST")
[ "$asks1" -gt "$asks0" ]; ok $? "the agent sent ASKING to the importing node ($asks0 -> $asks1)"

# 2. MOVED: the slot is given to the importing node; the agent's map
# still names the source until its next refresh (every 5 s)
for p in $CLUSTER_PORTS; do rc "$p" cluster setslot "$S" node "$dst_id" >/dev/null; done
r=$(redis-cli -h 127.0.0.1 -p "$SRC" hget "$H" moved 2>&1)
case $r in MOVED*) ok 0 "the source now answers $r" ;; *) ok 1 "the source answers MOVED (got '$r')" ;; esac
expect_eq "$(decided -n 4 rl-request tenant=s:moved)" "0 0 0 429 /0 0 0 0 " \
	"after the move (MOVED) the next tenant gets its plan too"

! grep -q 'msg=plan_lookup_failed' "$TMP/agent.log"; ok $? "no plan lookup failed"
kill -0 "$AGENT_PID"; ok $? "the agent is still running"
finish
