#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Unblocking a user through the real haproxy: an account locked out by
# failed logins (count: failures, sliding log) gets 429 even with the right
# password; `spoa-ratelimit key reset` (and DELETE /admin/keys/... on the
# admin API) unblocks it at once: the next login with the right password
# is 200, and other locked accounts stay locked. The admin token appears
# in no log line, the agent's or haproxy's.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

ADMIN_PORT=$(port 5)
TOKEN="e2e-admin-token-$RANDOM-$RANDOM-xyz"
printf '%s\n' "$TOKEN" >"$TMP/token"
{
	policy_head 25ms
	cat <<EOF
processing_timeout: 1s
admin: { listen: "127.0.0.1:$ADMIN_PORT", token_file: "$TMP/token" }
rules:
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    rate: 1000/s
    burst: 1000
    fail: open
  - name: login-account
    message: rl-login
    key: "login:user:{user}"
    algorithm: sliding-log
    limit: 3
    window: 15m
    count: failures
EOF
} >"$POLICY"
policy_valid "the policy with an admin: block is valid"
start_stack
ok $? "stack up, agent UP"
wait_port "$ADMIN_PORT" 5; ok $? "the admin API listens"

login() {	# login USER [PASSWORD]
	if [ -n "${2:-}" ]; then
		req -X POST -H 'X-Tenant: t' -H "X-Login-User: $1" \
			-H "X-Login-Password: $2" "$URL/login"
	else
		req -X POST -H 'X-Tenant: t' -H "X-Login-User: $1" "$URL/login"
	fi
}
lock_out() {	# lock_out USER: three failures, then 429 with the password
	for i in 1 2 3; do login "$1" >/dev/null; done
	login "$1" letmein
}

expect_eq "$(lock_out dave)" 429 "dave, after 3 failed logins, is locked out: 429 with the right password"
expect_eq "$(lock_out erin)" 429 "so is erin"
"$AGENT" key show -f "$POLICY" login-account user=dave >"$TMP/show"
grep -q '^remaining: *0 ' "$TMP/show"; ok $? "key show: dave has nothing left"
"$AGENT" key reset -f "$POLICY" login-account user=dave >"$TMP/reset"
expect_eq "$?:$(cat "$TMP/reset")" "0:login-account rl:{login-account:login:user:dave}: reset" \
	"key reset login-account user=dave"
expect_eq "$(login dave letmein)" 200 "dave logs in again right after the reset"
expect_eq "$(login erin letmein)" 429 "erin is still locked out"
c=$(curl -s -o "$TMP/del" -w '%{http_code}' --max-time 5 -X DELETE \
	-H "Authorization: Bearer $TOKEN" \
	"http://127.0.0.1:$ADMIN_PORT/admin/keys/login-account?user=erin")
expect_eq "$c" 200 "DELETE /admin/keys/login-account?user=erin: 200"
expect_eq "$(login erin letmein)" 200 "erin logs in again after the API reset"
c=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -X DELETE \
	"http://127.0.0.1:$ADMIN_PORT/admin/keys/login-account?user=dave")
expect_eq "$c" 401 "without the token the API refuses: 401"
grep -q 'msg=admin action=key_reset rule=login-account key="rl:{login-account:login:user:erin}" result=deleted' "$TMP/agent.log"
ok $? "the API reset is in the agent's log"
! grep -rqF "$TOKEN" "$TMP"/*.log; ok $? "the token appears in no log line"
finish
