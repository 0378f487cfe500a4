#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The login route however its path is spelt, through the shipped
# haproxy.cfg. An application may decode escapes (/%6Cogin), merge
# slashes (//login), ignore case (/LOGIN) or a path parameter
# (/login;jsessionid=1), and route each to its login handler; when the
# limits matched only the literal /login, each spelling was a login with
# no login limit at all (and the route's fail mode was open).
#   - every spelling counts against the same account (limit 2): 2 failures,
#     then 429 whatever the spelling;
#   - a dot segment (/x/../login, escaped or not), or a path that does
#     not decode (/login/%zz), is refused with 400 before any limit or
#     the application sees it;
#   - /loginx and /.well-known/x are not logins, and pass.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

login_stack ''	# no missing: line, the default

login() {	# login PATH: one failing POST as eve, the code
	req --path-as-is -X POST -H 'X-Login-User: eve' "$URL$1"
}

codes=""
for p in //login /%6Cogin /LOGIN '/login;jsessionid=1' /Login/ /login; do
	codes="$codes $(login "$p")"
done
expect_eq "$codes" " 401 401 429 429 429 429" \
	"//login, /%6Cogin, /LOGIN, /login;x, /Login/, /login: one account, 2 failures then 429"

codes=""
for p in /x/../login /x/%2e%2e/login /./login /x/..%2flogin; do
	codes="$codes $(login "$p")"
done
expect_eq "$codes" " 400 400 400 400" "a dot segment, plain or escaped: 400"
expect_eq "$(login /login/%zz)" 400 "a path that does not decode: 400"
expect_eq "$(grep -c 'be_app/app1' "$TMP/haproxy.log")" 2 "only the 2 failures before the lock reached the application"

expect_eq "$(login /loginx)" 200 "/loginx is not the login route"
expect_eq "$(req "$URL/.well-known/x")" 200 "/.well-known/x is not a dot segment"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"

finish
