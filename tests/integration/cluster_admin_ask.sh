#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# key show / key reset (the admin API, and the CLI) during a slot
# migration. While a limiter key's slot is MIGRATING on its master and the
# key itself has been MIGRATEd to the IMPORTING node, the source answers
# -ASK: the client must send ASKING, then the command, to the importing
# node. keyop followed MOVED only, so the admin API answered 503 with the
# raw "redis: ASK ..." and the CLI exited 1 for the whole migration. Now
# ASK is followed too (a connection to the node named, ASKING, the
# command), the slot staying the source's.
#
# Two rules: "tenant" (no penalty box) and "box" (block: the key and its
# record "<key>!b", both MIGRATEd). A reset DELs the key and its record in
# one command; with the record absent (tenant) the importing node answers
# that DEL TRYAGAIN (a key it has and one it has not, mid-migration), so
# the reset must DEL them one by one there.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../e2e/lib-topo.bash"	# start_cluster, keyslot, slot_owner
P1=$(port 1); P2=$(port 2); P3=$(port 3); AP=$(port 4); AM=$(port 5)
start_cluster "$P1" "$P2" "$P3" "$(port 11)" "$(port 12)" "$(port 13)"
ok $? "3 masters, cluster_state ok"
TOKEN="cluster-ask-token-$(date +%s)-abcdef"
echo "$TOKEN" >"$TMP/token"
{
	policy_top "$AP" "redis+cluster://127.0.0.1:$P1" 500ms 1
	echo "processing_timeout: 2s"
	echo "admin: { listen: \"127.0.0.1:$AM\", token_file: \"$TMP/token\" }"
	cat <<YAML
rules:
  - { name: tenant, message: rl-request, key: "t:{tenant}", rate: 1/min, burst: 5 }
  - { name: box, message: rl-box, key: "b:{u}", rate: 1/h, burst: 1, block: 10m }
YAML
} >"$TMP/policy.yaml"
agent_up "$TMP/policy.yaml"
until_ok 50 listening "127.0.0.1:$AM"; ok $? "the admin API listens"
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@"; }
mapped() { grep -q 'msg=cluster_map' "$TMP/agent.log"; }
until_ok 100 mapped; ok $? "the agent has the slot map"
U="http://127.0.0.1:$AM"
AUTH="Authorization: Bearer $TOKEN"
code() { curl -s -o "$TMP/body" -w '%{http_code}' --max-time 5 -H "$AUTH" "$@"; }
# js EXPR: EXPR of the last body's JSON d (python), or "bad json"
js() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($1)" "$TMP/body" 2>/dev/null || echo "bad json: $(head -c 200 "$TMP/body")"; }
# on_node PORT CMD...: CMD on the importing node PORT after ASKING
on_node() { _p=$1; shift; printf 'ASKING\n%s\n' "$*" | redis-cli -h 127.0.0.1 -p "$_p" 2>&1 | grep . | tail -1; }

T='rl:{tenant:t:mig}'; B='rl:{box:b:mig}'
out=$(c -n 2 rl-request tenant=s:mig)
expect_eq "$(echo "$out" | field status | tr '\n' ' ')" "0 0 " "two requests on $T"
out=$(c -n 3 rl-box u=s:mig)
expect_eq "$(echo "$out" | field status | tr '\n' ' ')" "0 429 429 " "$B goes to its penalty box"
rcc() { redis-cli -c -h 127.0.0.1 -p "$P1" "$@" 2>/dev/null; }
expect_eq "$(rcc exists "$T")$(rcc exists "$B" "$B!b")" 12 "the two keys and the block record exist"

# migrate_keys KEY...: the first half of a migration of the keys' slot
# (one slot: they share a hash tag) to another master; the source then
# answers ASK for them. Sets SRC, DST, S and MIGRATED (MIGRATE's answer).
migrate_keys() {
	S=$(keyslot "$1"); SRC=$(slot_owner "$S")
	for p in $CLUSTER_PORTS; do [ "$p" != "$SRC" ] && DST=$p && break; done
	rc "$DST" cluster setslot "$S" importing "$(rc "$SRC" cluster myid)" >/dev/null
	rc "$SRC" cluster setslot "$S" migrating "$(rc "$DST" cluster myid)" >/dev/null
	MIGRATED=$(rc "$SRC" migrate 127.0.0.1 "$DST" "" 0 5000 keys "$@")
}
migrate_keys "$T"
expect_eq "$MIGRATED" OK "MIGRATE moves $T to the importing node"
TS=$S; TSRC=$SRC; TDST=$DST
r=$(redis-cli -h 127.0.0.1 -p "$TSRC" pttl "$T" 2>&1)
case $r in ASK*) ok 0 "the source answers $r" ;; *) ok 1 "the source answers ASK (got '$r')" ;; esac
asks0=$(asking_calls "$TDST")

# ---- tenant: show, then reset, during the migration --------------------
expect_eq "$(code "$U/admin/keys/tenant?tenant=mig")" 200 "GET /admin/keys/tenant during the migration: 200"
expect_eq "$(js 'd["remaining"], d["raw"]["type"], d["raw"]["pttl_ms"] > 0')" "3 string True" \
	"... the key's state from the importing node (3 of 5 left)"
asks1=$(asking_calls "$TDST")
[ "$asks1" -gt "$asks0" ]; ok $? "... through ASKING on the importing node ($asks0 -> $asks1)"
timeout 10 "$AGENT" key show -f "$TMP/policy.yaml" tenant tenant=mig >"$TMP/show" 2>&1
expect_eq "$?:$(sed -n 's/^remaining: *//p' "$TMP/show")" "0:3" "the CLI's key show too"
expect_eq "$(code -X DELETE "$U/admin/keys/tenant?tenant=mig")" 200 "DELETE /admin/keys/tenant during the migration: 200"
expect_eq "$(js 'd["deleted"]')" 1 "... one key deleted"
expect_eq "$(on_node "$TDST" exists "$T")" 0 "... on the importing node, which held it"
expect_eq "$(rc "$TDST" cluster countkeysinslot "$TS")/$(rc "$TSRC" cluster countkeysinslot "$TS")" "0/0" \
	"... nothing left in its slot on either node"
expect_eq "$(code "$U/admin/keys/tenant?tenant=mig")" 200 "a show after the reset: 200"
expect_eq "$(js 'd["remaining"], d["raw"]["type"]')" "5 none" "... a full budget, no key"

# ---- box: the key and its block record both migrated -------------------
migrate_keys "$B" "$B!b"
expect_eq "$MIGRATED" OK "MIGRATE moves $B and $B!b to the importing node"
expect_eq "$(code "$U/admin/key?key=rl%3A%7Bbox%3Ab%3Amig%7D")" 200 "GET /admin/key?key=$B during the migration: 200"
expect_eq "$(js 'd["allowed"], d["block"]["blocked"], d["block"]["offences"] >= 1')" "False True True" \
	"... it shows the penalty box held on the importing node"
timeout 10 "$AGENT" key reset -f "$TMP/policy.yaml" box u=mig >"$TMP/r" 2>&1
expect_eq "$?:$(cat "$TMP/r")" "0:box $B: reset" "the CLI's key reset during the migration"
expect_eq "$(on_node "$DST" exists "$B")/$(on_node "$DST" exists "$B!b")" 0/0 "... the key and its record gone from the importing node"
expect_eq "$(rc "$DST" cluster countkeysinslot "$S")/$(rc "$SRC" cluster countkeysinslot "$S")" "0/0" \
	"... nothing left in its slot on either node"

# ---- the redirects are bounded --------------------------------------------
# a loop: the importing node made the slot's owner and MIGRATING back to
# the source, the key on neither: each sends the other (ASK, or MOVED
# once the source hears of the new owner) for ever
rc "$TDST" cluster setslot "$TS" node "$(rc "$TDST" cluster myid)" >/dev/null
rc "$TDST" cluster setslot "$TS" migrating "$(rc "$TSRC" cluster myid)" >/dev/null
r=$(on_node "$TDST" pttl "$T")
case $r in ASK*) ok 0 "the two nodes now send ASK to each other ($r)" ;; *) ok 1 "an ASK loop (got '$r')" ;; esac
expect_eq "$(code "$U/admin/keys/tenant?tenant=mig")" 503 "a show in a redirect loop: 503, not a hang"
expect_eq "$(js '"ASK" in d["error"] or "MOVED" in d["error"]')" True "... saying the last redirect"
kill -0 "$AGENT_PID"; ok $? "the agent is still running"
finish
