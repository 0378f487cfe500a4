#!/bin/bash
# Login wiring: POST /login sends rl-login (request) and rl-login-result
# (response, with the status); a count: failures rule charges only the
# 401/403 answers per account. After 3 failures the account gets 429 with
# Retry-After, even with the right password; other accounts, successful
# logins and the form-field account source work as configured.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

write_policy 1000 1000/s	# the tenant rule out of the way
start_stack
ok $? "stack up, agent UP"

login() {	# login USER [PASSWORD]
	if [ -n "${2:-}" ]; then
		req -X POST -H 'X-Tenant: t' -H "X-Login-User: $1" \
			-H "X-Login-Password: $2" "$URL/login"
	else
		req -X POST -H 'X-Tenant: t' -H "X-Login-User: $1" "$URL/login"
	fi
}

codes=""
for i in 1 2 3 4 5; do codes="$codes $(login carol letmein)"; done
expect_eq "$codes" " 200 200 200 200 200" "successful logins are not counted (count: failures)"

codes=""
for i in 1 2 3; do codes="$codes $(login bob)"; done
expect_eq "$codes" " 401 401 401" "3 failed logins of bob reach the application (401)"
c=$(login bob)
expect_eq "$c" 429 "the 4th login of bob: 429"
ra=$(hdr Retry-After)
is_posint "$ra" && [ "$ra" -le 900 ]
ok $? "its Retry-After is within the 15m window ('$ra')"
rl=$(hdr RateLimit); rp=$(hdr RateLimit-Policy)
[[ $rl =~ $SF_LIST ]] && [[ $rl =~ ^\"login-account\" ]]
ok $? "RateLimit names login-account ('$rl')"
[[ $rp =~ $SF_LIST ]] && [ "$(sf_param "$rp" q)" = 3 ] && [ "$(sf_param "$rp" w)" = 900 ]
ok $? "RateLimit-Policy is q=3;w=900 ('$rp')"
expect_eq "$(login bob letmein)" 429 "bob is locked out even with the right password"
expect_eq "$(login BOB)" 429 "the account name is case-insensitive (BOB is bob)"
expect_eq "$(login dave)" 401 "another account is not affected"

# The account from a urlencoded form field when there is no header.
codes=""
for i in 1 2 3 4; do
	codes="$codes $(req -X POST -H 'X-Tenant: t' -d 'username=erin&password=x' "$URL/login")"
done
expect_eq "$codes" " 401 401 401 429" "the username form field is the account without X-Login-User"

# Not a login: GET /login and POST elsewhere are not charged to bob.
expect_eq "$(req -H 'X-Tenant: t' -H 'X-Login-User: bob' "$URL/login")" 200 "GET /login is not a login attempt"
expect_eq "$(req -X POST -H 'X-Tenant: t' -H 'X-Login-User: bob' "$URL/api")" 200 "POST elsewhere is not a login attempt"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"

finish
