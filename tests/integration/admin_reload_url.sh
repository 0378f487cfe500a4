# SPDX-License-Identifier: Apache-2.0
# redis.url is restart-only ("needs_restart ... kept=running"):
# after a reload that changes it, the workers still charge the old Redis,
# so the admin API's reset must go there too, not to the file's new URL.
. "$(dirname "$0")/../lib.sh"
RA=$(port 1); RB=$(port 2); AP=$(port 3); AM=$(port 4)
start_redis "$RA"; start_redis "$RB"
TOKEN="test-admin-token-$$-abcdefgh"
printf '%s\n' "$TOKEN" >"$TMP/token"
policy() {	# REDIS-PORT
	cat <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis://127.0.0.1:$1/0", timeout: 100ms }
processing_timeout: 1s
admin: { listen: "127.0.0.1:$AM", token_file: "$TMP/token" }
rules:
  - { name: login, message: rl-request, key: "u:{user}", rate: 1/h, burst: 1 }
YAML
}
policy "$RA" >"$TMP/p.yaml"
agent_up "$TMP/p.yaml"
until_ok 50 listening "127.0.0.1:$AM"
# alice is locked out in the Redis the agent runs on (a TAT an hour ahead)
tat=$(( $(date +%s) * 1000000 + 3600 * 1000000 ))
rc "$RA" set 'rl:{login:u:alice}' "$tat" px 3600000 >/dev/null
expect_eq "$(timeout 5 "$CLIENT" -a "127.0.0.1:$AP" rl-request user=s:alice | field status)" 429 \
	"alice is denied (the agent runs on Redis A)"
policy "$RB" >"$TMP/p.yaml"
kill -HUP "$AGENT_PID"
until_ok 50 grep -q 'msg=reloaded' "$TMP/agent.log"
grep -q 'msg=needs_restart field=redis.url kept=running' "$TMP/agent.log"
ok $? "the reload keeps the running redis.url"
body=$(curl -s --max-time 5 -X DELETE -H "Authorization: Bearer $TOKEN" \
	"http://127.0.0.1:$AM/admin/keys/login?user=alice")
echo "# DELETE answered: $body"
expect_eq "$(rc "$RA" exists 'rl:{login:u:alice}')" 0 \
	"the admin reset deleted the key in the Redis the agent runs on"
sleep 0.7	# past the near-cache's 0.5 s hold (documented)
expect_eq "$(timeout 5 "$CLIENT" -a "127.0.0.1:$AP" rl-request user=s:alice | field status)" 0 \
	"alice passes after the reset"
finish
