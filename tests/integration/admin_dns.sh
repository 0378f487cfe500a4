#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# the admin API runs on the main loop (admin.h: "ADMIN_REDIS_
# TIMEOUT_US at most per command"), beside /healthz and /metrics. With
# redis.url naming a host and DNS not answering (an outage), an admin
# request must not freeze that loop for the resolver's whole timeout
# (here 3 s x 2): a liveness probe of /healthz would kill the agent.
# Private network and mount namespace, as dns_hang.sh.
. "$(dirname "$0")/../netns.sh"
. "$(dirname "$0")/../lib.sh"
ip link set lo up
RP=$(port 1); AP=$(port 2); AM=$(port 3)
printf 'nameserver 127.0.0.1\noptions timeout:3 attempts:2\n' >"$TMP/resolv.conf"
cp /etc/hosts "$TMP/hosts"
mount --bind "$TMP/resolv.conf" /etc/resolv.conf
mount --bind "$TMP/hosts" /etc/hosts
start_redis "$RP"
"$TOOLS/blackhole" -u 53 120 >"$TMP/dns.out" &
PIDS="$PIDS $!"
until_ok 50 grep -q ready "$TMP/dns.out"; ok $? "a DNS server that never answers"
TOKEN="test-dns-token-$$-abcdefgh"
printf '%s\n' "$TOKEN" >"$TMP/token"
cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis://redis-under-test.example:$RP/0", timeout: 100ms }
processing_timeout: 1s
metrics: { listen: "127.0.0.1:$AM" }
admin: { listen: "127.0.0.1:$AM", token_file: "$TMP/token" }
rules:
  - { name: t, message: rl-request, key: "t:{tenant}", rate: 10/s, burst: 10, fail: open }
YAML
AGENT_WAIT_S=20 agent_up "$TMP/policy.yaml"
until_ok 50 listening "127.0.0.1:$AM"
curl -s -o "$TMP/admin.out" -w '%{http_code} %{time_total}\n' --max-time 20 \
	-H "Authorization: Bearer $TOKEN" \
	"http://127.0.0.1:$AM/admin/keys/t?tenant=a" >"$TMP/admin.code" &
apid=$!
sleep 0.3
h=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' --max-time 3 "http://127.0.0.1:$AM/healthz")
wait $apid
echo "# admin request: $(cat "$TMP/admin.code") $(cat "$TMP/admin.out")"
echo "# /healthz meanwhile: $h"
t=${h#* }
[ "${h%% *}" != 000 ] && awk -v t="$t" 'BEGIN { exit !(t < 1.0) }'
ok $? "/healthz answers within 1 s while an admin request waits on DNS ($h)"
# once the name resolves, the API answers (from the resolver's cache)
echo "127.0.0.1 redis-under-test.example" >>"$TMP/hosts"
admin_ok() {
	[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 \
		-H "Authorization: Bearer $TOKEN" \
		"http://127.0.0.1:$AM/admin/keys/t?tenant=a")" = 200 ]
}
until_ok 200 admin_ok; ok $? "the admin API answers once the name resolves"
finish
