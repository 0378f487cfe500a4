# SPDX-License-Identifier: Apache-2.0
# turning the admin API on or off needs a restart (OPERATING.md);
# a reload whose file has no admin: block logs "needs_restart
# field=admin.listen kept=running", so the running API must go on
# answering with the running token, not 401 every request.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); AM=$(port 3)
start_redis "$RP"
TOKEN="test-off-token-$$-abcdefgh"
printf '%s\n' "$TOKEN" >"$TMP/token"
policy() {	# with-admin(0/1)
	cat <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms }
processing_timeout: 1s
rules:
  - { name: login, message: rl-request, key: "u:{user}", rate: 2/h, burst: 2 }
YAML
	[ "$1" = 1 ] && echo "admin: { listen: \"127.0.0.1:$AM\", token_file: \"$TMP/token\" }"
	:
}
code() { curl -s -o /dev/null -w '%{http_code}' --max-time 3 -H "Authorization: Bearer $TOKEN" \
	"http://127.0.0.1:$AM/admin/keys/login?user=alice"; }
policy 1 >"$TMP/p.yaml"
agent_up "$TMP/p.yaml"
until_ok 50 listening "127.0.0.1:$AM"
expect_eq "$(code)" 200 "admin answers"
policy 0 >"$TMP/p.yaml"
kill -HUP "$AGENT_PID"
until_ok 50 grep -q 'msg=reloaded' "$TMP/agent.log"
grep -q 'msg=needs_restart field=admin.listen kept=running' "$TMP/agent.log"
ok $? "the reload says the running admin API is kept"
expect_eq "$(code)" 200 "... and the admin API still answers with the running token"
finish
