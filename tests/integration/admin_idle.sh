# SPDX-License-Identifier: Apache-2.0
# The admin API keeps its Redis connection between requests; Redis may
# close it meanwhile (its `timeout` for idle clients, a restart, a
# proxy's idle timeout). The next request must still be answered, on a
# new connection, not with a 503 the operator has to retry.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); AM=$(port 3)
TOKEN="s3cret-token-$(date +%s)-abcdef"
printf '%s\n' "$TOKEN" >"$TMP/token"
start_redis "$RP" --timeout 1
policy_top "$AP" "redis://127.0.0.1:$RP/0" 50ms 1 >"$TMP/p.yaml"
cat >>"$TMP/p.yaml" <<YAML
processing_timeout: 1s
admin: { listen: "127.0.0.1:$AM", token_file: "$TMP/token" }
rules:
  - { name: login, message: rl-request, key: "u:{user}", rate: 1/h, burst: 1 }
YAML
agent_up "$TMP/p.yaml"
until_ok 50 listening "127.0.0.1:$AM"; ok $? "the admin API listens"
get() {	# METHOD PATH: the status code
	curl -s -o "$TMP/body" -w '%{http_code}' --max-time 5 -X "$1" \
		-H "Authorization: Bearer $TOKEN" "http://127.0.0.1:$AM$2"
}
expect_eq "$(get GET '/admin/keys/login?user=a')" 200 "key show"
sleep 3 # Redis closes the idle connection (timeout 1)
expect_eq "$(get DELETE '/admin/keys/login?user=a')" 200 "key reset after Redis closed the idle connection ($(cat "$TMP/body"))"
sleep 3
expect_eq "$(get GET '/admin/keys/login?user=a')" 200 "key show after it too ($(cat "$TMP/body"))"
sleep 3
expect_eq "$(get GET '/admin/top?rule=login')" 200 "top after it too ($(cat "$TMP/body"))"
finish
