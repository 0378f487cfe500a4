#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Login protection through the shipped haproxy.cfg: POST /login sends
# rl-login (request) and rl-login-result (response, with the status); the
# two count: failures rules below charge only the 401/403 answers, per
# account (5 per 15m) and per client IP (10 per 15m). Neither says fail:,
# so both fail closed (the default for count: failures).
#   - successful logins cost nothing, on either rule;
#   - 5 failures of one account lock it, from one IP or from 5 different
#     ones: the next attempt is 429 from a fresh IP, even with the right
#     password, while other accounts are unaffected;
#   - failures of many accounts from one IP lock that IP (login-ip);
#   - with Redis gone, logins get 503 and other requests pass.
# The client IP is the real source address: curl binds 127.0.X.Y (all of
# 127/8 is loopback), so both phases (ip=src) see it.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

{
	policy_head 25ms
	cat <<EOF
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
    limit: 5
    window: 15m
    count: failures
  - name: login-ip
    message: rl-login
    key: "login:ip:{ip/64}"
    algorithm: sliding-log
    limit: 10
    window: 15m
    count: failures
EOF
} >"$POLICY"
policy_valid "the login policy is valid"
start_stack
ok $? "stack up, agent UP"

login() {	# login ADDR USER [PASSWORD]: one POST /login from ADDR
	if [ -n "${3:-}" ]; then
		req --interface "$1" -X POST -H 'X-Tenant: t' -H "X-Login-User: $2" \
			-H "X-Login-Password: $3" "$URL/login"
	else
		req --interface "$1" -X POST -H 'X-Tenant: t' -H "X-Login-User: $2" "$URL/login"
	fi
}
logins() {	# logins N ADDR USER [PASSWORD]: N logins, the codes
	for i in $(seq "$1"); do printf ' %s' "$(login "$2" "$3" "${4:-}")"; done
}
repeat() { for i in $(seq "$1"); do printf ' %s' "$2"; done; }	# repeat N WORD
member() {	# member FIELD NAME: rule NAME's list member of a RateLimit field
	echo "$1" | tr ',' '\n' | sed 's/^ *//' | grep "^\"$2\";"
}
body_policy() { sed -n 's/.*"policy":"\([^"]*\)".*/\1/p' "$TMP/b"; }

# ---- successful logins cost nothing -----------------------------------------
# 20 successes, over both limits (5 and 10); then the account's and the
# IP's whole failure budget (5) must still be there.
expect_eq "$(logins 20 127.0.1.1 carol letmein)" "$(repeat 20 200)" \
	"20 successful logins of carol from one IP all pass (count: failures)"
expect_eq "$(logins 5 127.0.1.1 carol)" "$(repeat 5 401)" \
	"after them, 5 failed logins of carol still reach the application: the successes were not charged"
c=$(login 127.0.1.1 carol letmein)
expect_eq "$c $(body_policy)" "429 login-account" "after 5 failures carol is locked: 429 (login-account), even with the right password"

# ---- failed logins of one account from one IP --------------------------------
expect_eq "$(logins 5 127.0.0.1 bob)" "$(repeat 5 401)" "5 failed logins of bob reach the application (401)"
c=$(login 127.0.0.1 bob)
expect_eq "$c" 429 "the 6th login of bob: 429"
ra=$(hdr Retry-After)
is_posint "$ra" && [ "$ra" -le 900 ]
ok $? "its Retry-After is within the 15m window ('$ra')"
rl=$(hdr RateLimit); rp=$(hdr RateLimit-Policy)
[[ $rl =~ $SF_LIST ]] && [[ $rl =~ ^\"login-account\" ]]
ok $? "RateLimit names login-account ('$rl')"
[[ $rp =~ $SF_LIST ]] && [ "$(sf_param "$rp" q)" = 5 ] && [ "$(sf_param "$rp" w)" = 900 ]
ok $? "RateLimit-Policy is q=5;w=900 ('$rp')"
expect_eq "$(login 127.0.0.1 bob letmein)" 429 "bob is locked out even with the right password"
expect_eq "$(login 127.0.0.1 BOB)" 429 "the account name is case-insensitive (BOB is bob)"
expect_eq "$(login 127.0.0.1 dave)" 401 "another account is not affected"

# The account from a urlencoded form field when there is no header.
codes=""
for i in 1 2 3 4 5 6; do
	codes="$codes $(req --interface 127.0.0.2 -X POST -H 'X-Tenant: t' \
		-d 'username=erin&password=x' "$URL/login")"
done
expect_eq "$codes" "$(repeat 5 401) 429" "the username form field is the account without X-Login-User"

# Not a login: GET /login and POST elsewhere are not charged to bob.
expect_eq "$(req -H 'X-Tenant: t' -H 'X-Login-User: bob' "$URL/login")" 200 "GET /login is not a login attempt"
expect_eq "$(req -X POST -H 'X-Tenant: t' -H 'X-Login-User: bob' "$URL/api")" 200 "POST elsewhere is not a login attempt"

# ---- one account, failures from 5 different IPs --------------------------------
codes=""
for n in 1 2 3 4 5; do codes="$codes $(login "127.0.2.$n" mallory)"; done
expect_eq "$codes" "$(repeat 5 401)" "5 failed logins of mallory, each from another IP, reach the application"
c=$(login 127.0.2.6 mallory letmein)
expect_eq "$c $(body_policy)" "429 login-account" \
	"mallory from a 6th, fresh IP with the right password: 429 (login-account)"
c=$(login 127.0.2.7 mallory)
expect_eq "$c $(body_policy)" "429 login-account" "mallory from a 7th IP: 429 as well"
expect_eq "$(login 127.0.2.6 trent)" 401 "another account from that fresh IP is not affected"
expect_eq "$(login 127.0.2.1 trent letmein)" 200 "another account from one of the 5 IPs logs in"

# ---- many accounts from one IP ----------------------------------------------------
codes=""
for n in $(seq 10); do codes="$codes $(login 127.0.3.1 "user$n")"; done
expect_eq "$codes" "$(repeat 10 401)" "10 accounts fail once each from 127.0.3.1: all reach the application"
c=$(login 127.0.3.1 user11)
expect_eq "$c $(body_policy)" "429 login-ip" "an 11th account from that IP: 429 (login-ip)"
rl=$(hdr RateLimit); rp=$(hdr RateLimit-Policy)
[[ $rl =~ $SF_LIST ]] && [ "$(sf_param "$(member "$rl" login-ip)" r)" = 0 ]
ok $? "RateLimit: login-ip has r=0 ('$rl')"
[[ $rp =~ $SF_LIST ]] && [ "$(sf_param "$(member "$rp" login-ip)" q)" = 10 ]
ok $? "RateLimit-Policy: login-ip has q=10 ('$rp')"
c=$(login 127.0.3.1 user12 letmein)
expect_eq "$c $(body_policy)" "429 login-ip" "the IP is locked even for a right password"
expect_eq "$(login 127.0.3.2 user1)" 401 "user1 from another IP is not locked (1 failure of 5)"
expect_eq "$(login 127.0.3.2 user11)" 401 "user11 from another IP is not locked either"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"

# ---- Redis gone: the login rules fail closed (their default) ----------------------
eval "rpid=\$REDIS_PID_$REDIS_PORT"
{ kill -9 "$rpid"; wait "$rpid"; } 2>/dev/null
c=$(login 127.0.4.1 zoe letmein)
expect_eq "$c $(hdr Retry-After | grep -c '^[1-9][0-9]*$')" "503 1" \
	"Redis down: a login gets 503 with Retry-After (login rules without fail: are closed)"
expect_eq "$(req -H 'X-Tenant: t' "$URL/")" 200 "Redis down: other requests pass (tenant: fail: open)"

finish
