# SPDX-License-Identifier: Apache-2.0
# key show/reset and /admin/keys on a Redis Cluster whose first seed
# (the first node of redis+cluster://) is down: the other seeds are
# asked, as the workers do, so the keys held by the masters still up
# can be shown and reset.
. "$(dirname "$0")/../lib.sh"
P1=$(port 1); P2=$(port 2); P3=$(port 3); AP=$(port 4); AM=$(port 5)
cluster3_up "$P1" "$P2" "$P3"
for p in "$P1" "$P2" "$P3"; do
	rc "$p" config set cluster-require-full-coverage no >/dev/null
done
TOKEN="s3cret-token-$(date +%s)-abcdef"
printf '%s\n' "$TOKEN" >"$TMP/token"
cat >"$TMP/p.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis+cluster://127.0.0.1:$P1,127.0.0.1:$P2,127.0.0.1:$P3", timeout: 200ms }
processing_timeout: 1s
admin: { listen: "127.0.0.1:$AM", token_file: "$TMP/token" }
rules:
  - { name: login, message: rl-request, key: "u:{user}", rate: 1/h, burst: 1 }
YAML
agent_up "$TMP/p.yaml"
until_ok 50 listening "127.0.0.1:$AM"; ok $? "the admin API listens"
# a user whose key lives on the second master (P2)
U=""
for i in $(seq 1 200); do
	[ "$(rc "$P2" exists "rl:{login:u:user$i}")" = 0 ] && { U=user$i; break; }
done
[ -n "$U" ]; ok $? "a user whose key is on node 2 ($U)"
timeout 5 "$CLIENT" -a "127.0.0.1:$AP" -n 2 rl-request "user=s:$U" >/dev/null
expect_eq "$(rc "$P2" exists "rl:{login:u:$U}")" 1 "... charged there"
eval "kill \$CPID_$P1"
until_ok 50 sh -c "! redis-cli -h 127.0.0.1 -p $P1 ping >/dev/null 2>&1"
ok $? "the first seed is down"
timeout 10 "$AGENT" key show -f "$TMP/p.yaml" login "user=$U" >"$TMP/s" 2>&1
expect_eq "$?" 0 "key show asks the next seed ($(head -c 200 "$TMP/s"))"
code=$(curl -s -o "$TMP/g" -w '%{http_code}' --max-time 5 \
	-H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$AM/admin/keys/login?user=$U")
expect_eq "$code" 200 "GET /admin/keys too ($(head -c 200 "$TMP/g"))"
code=$(curl -s -o "$TMP/d" -w '%{http_code}' --max-time 5 -X DELETE \
	-H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$AM/admin/keys/login?user=$U")
expect_eq "$code" 200 "DELETE /admin/keys too ($(head -c 200 "$TMP/d"))"
expect_eq "$(rc "$P2" exists "rl:{login:u:$U}")" 0 "... the key is gone"
sleep 1 # past the near-cache's hold of the denial
timeout 5 "$CLIENT" -a "127.0.0.1:$AP" -n 2 rl-request "user=s:$U" >/dev/null
timeout 10 "$AGENT" key reset -f "$TMP/p.yaml" login "user=$U" >"$TMP/r" 2>&1
expect_eq "$?:$(cat "$TMP/r")" "0:login rl:{login:u:$U}: reset" "key reset asks the next seed"
finish
