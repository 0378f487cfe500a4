#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The identities the limits are keyed by (X-Api-Key, X-Login-User, the
# username form field, X-Tenant), sent twice or with a comma, through the
# shipped haproxy.cfg. req.hdr() takes the last comma-separated value,
# req.body_param() the first field, while an application may read the
# first header line (Go's Header.Get, Java's getHeader) or the last form
# field (PHP): a client that adds a junk second X-Api-Key, or a junk first
# username, got a fresh bucket on every request while the application
# authenticated the real one, past its per-key or per-account limit.
#   - a repeated X-Api-Key, X-Login-User or X-Tenant, or a repeated
#     username field in a login form: 400, never reaching the application,
#     never an SPOE error or a 500 (RFC 9110 5.3: these are not lists);
#   - so is a username field spelt with percent-escapes (user%6Eame=),
#     which the application decodes and body_param() does not, or one
#     after a ';', or an X-Login-User beside a username field;
#   - so is a login POST with a username in its query string, which a
#     servlet's getParameter() reads before the form's;
#   - a comma inside one X-Api-Key or X-Login-User is part of the value:
#     "smith, john" and "doe, john" are two accounts, not both "john";
#   - a single X-Api-Key is still limited (2/min: 2 pass, then 429).
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

# the login rule (missing: deny) after a per-key gcra rule, 2/min
login_stack deny '  - name: key
    message: rl-request
    key: "k:{key}"
    rate: 2/min
    burst: 2
    missing: skip'

# ---- repeated identities: 400 ----------------------------------------------------
codes=""
for i in 1 2 3 4; do
	codes="$codes $(req -H 'X-Api-Key: K' -H "X-Api-Key: junk$i" "$URL/")"
done
expect_eq "$codes" " 400 400 400 400" "X-Api-Key twice (K, then a junk one): 400, not a fresh bucket per request"
expect_eq "$(req -H 'X-Tenant: a' -H 'X-Tenant: b' "$URL/")" 400 "X-Tenant twice: 400"
codes=""
for i in 1 2 3; do
	codes="$codes $(req -X POST -H 'X-Login-User: victim' -H "X-Login-User: r$i" "$URL/login")"
done
expect_eq "$codes" " 400 400 400" "X-Login-User twice: 400"
codes=""
for i in 1 2 3; do
	codes="$codes $(req -X POST -d "username=r$i&password=x&username=victim" "$URL/login")"
done
expect_eq "$codes" " 400 400 400" "a login form with username twice: 400"
codes=""
for body in 'username=r1&password=x&user%6Eame=victim' 'user%6eame=victim&password=x' \
	'%75%73%65%72%6E%61%6D%65=victim' 'username=r2;username=victim' \
	"$(printf 'username=r3\n&username=victim')"; do
	codes="$codes $(req -X POST --data-binary "$body" "$URL/login")"
done
expect_eq "$codes" " 400 400 400 400 400" \
	"username spelt with escapes, after ';', or repeated past a newline: 400"
codes=""
for i in 1 2 3; do
	codes="$codes $(req -X POST -H "X-Login-User: r$i" -d 'username=victim&password=x' "$URL/login")"
done
expect_eq "$codes" " 400 400 400" "X-Login-User and a username field together: 400"
codes="$(req -X POST -d 'username=r4&password=x' "$URL/login?username=victim")"
codes="$codes $(req -X POST -H 'Content-Type: application/json' --data-binary '{"username":"r5"}' "$URL/login?UserName=victim")"
codes="$codes $(req -X POST -H 'X-Login-User: r6' "$URL/login?next=%2F&user%6Eame=victim")"
codes="$codes $(req -X POST -d 'password=x' "$URL/login?username[]=victim")"
expect_eq "$codes" "400 400 400 400" \
	"a username in the query string (any spelling) beside the form's, JSON's or X-Login-User: 400"
expect_eq "$(grep -c 'be_app/app1' "$TMP/haproxy.log")" 0 "none of them reached the application"

# ---- a comma is part of the value ---------------------------------------------
codes=""
for i in 1 2; do codes="$codes $(req -X POST -H 'X-Login-User: smith, john' "$URL/login")"; done
codes="$codes $(req -X POST -H 'X-Login-User: doe, john' "$URL/login")"
expect_eq "$codes" " 401 401 401" "2 failures of 'smith, john' do not lock 'doe, john' (limit 2)"
expect_eq "$(req -X POST -H 'X-Login-User: smith, john' "$URL/login")" 429 "'smith, john' is locked after its 2 failures"

# ---- other escaped field names are fine, and the field is counted ----------------
codes=""
for i in 1 2 3; do
	codes="$codes $(req -X POST -d 'session%5Bemail%5D=a&username=carol&password=x' "$URL/login?next=%2F&usernames=1")"
done
expect_eq "$codes" " 401 401 429" \
	"a form with session%5Bemail%5D and one username, ?next=/&usernames=1: carol's 2 failures, then 429"

codes="$(req -X POST -d 'username=dan+smith&password=x' "$URL/login")"
codes="$codes $(req -X POST -d 'username=dan%20smith&password=x' "$URL/login")"
codes="$codes $(req -X POST -d 'username=Dan+Smith&password=x' "$URL/login")"
expect_eq "$codes" "401 401 429" "'+' in a form is a space: dan+smith and dan%20smith are one account"

# ---- one X-Api-Key: limited as before ---------------------------------------------
codes=""
for i in 1 2 3; do codes="$codes $(req -H 'X-Api-Key: K' "$URL/")"; done
expect_eq "$codes" " 200 200 429" "a single X-Api-Key K: 2 pass, then 429"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"
! grep -qE '" 5[0-9][0-9] |fe_api [^ ]+ [^ ]+ 5[0-9][0-9] ' "$TMP/haproxy.log"
ok $? "no 5xx"

finish
