# SPDX-License-Identifier: Apache-2.0
# key show/reset, the penalty box's reset, and overrides on a
# Redis Cluster (redis+cluster:// policy; `override -r` with a node).
. "$(dirname "$0")/../lib.sh"
P1=$(port 1); P2=$(port 2); P3=$(port 3); AP=$(port 4)
rcc() { redis-cli -c -h 127.0.0.1 -p "$P1" "$@" 2>/dev/null; }
cluster3_up "$P1" "$P2" "$P3"
cat >"$TMP/p.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 2
redis: { url: "redis+cluster://127.0.0.1:$P1,127.0.0.1:$P2", timeout: 200ms }
processing_timeout: 1s
rules:
  - { name: box, message: rl-box, key: "b:{u}", rate: 1/h, burst: 1, block: 10m }
  - { name: tenant, message: rl-request, key: "t:{tenant}", algorithm: fixed-window, limit: 1, window: 1h }
YAML
agent_up "$TMP/p.yaml"
sleep 1
for u in u1 u2 u3 u4 u5 u6; do
	timeout 5 "$CLIENT" -a "127.0.0.1:$AP" -n 3 rl-box "u=s:$u" >/dev/null
done
for u in u1 u2 u3 u4 u5 u6; do
	expect_eq "$(rcc exists "rl:{box:b:$u}!b")" 1 "$u is in the penalty box"
done
for u in u1 u2 u3 u4 u5 u6; do
	timeout 10 "$AGENT" key reset -f "$TMP/p.yaml" box "u=$u" >"$TMP/r" 2>&1
	expect_eq "$?:$(cat "$TMP/r")" "0:box rl:{box:b:$u}: reset" "key reset $u on the cluster"
	expect_eq "$(rcc exists "rl:{box:b:$u}" "rl:{box:b:$u}!b")" 0 "... key and block record gone"
done
sleep 1.1
for u in u1 u2 u3 u4 u5 u6; do
	expect_eq "$(timeout 5 "$CLIENT" -a "127.0.0.1:$AP" rl-box "u=s:$u" | field status)" 0 "$u passes within 1 s"
done
timeout 10 "$AGENT" key show --json -f "$TMP/p.yaml" box u=u1 >"$TMP/s" 2>&1
ok $? "key show on the cluster ($(head -c 200 "$TMP/s"))"
# overrides: -r with one node (docs), on whichever node holds the slot
for node in "$P1" "$P2" "$P3"; do
	timeout 10 "$AGENT" override set -f "$TMP/p.yaml" -r "redis://127.0.0.1:$node" tenant "tenant=n$node" --deny >"$TMP/o" 2>&1
	echo "# override set via node $node: $? $(cat "$TMP/o")"
done
sleep 1.2
okn=0
for node in "$P1" "$P2" "$P3"; do
	[ "$(timeout 5 "$CLIENT" -a "127.0.0.1:$AP" rl-request "tenant=s:n$node" | field status)" = 429 ] && okn=$((okn+1))
done
echo "# bans applied: $okn"
finish
