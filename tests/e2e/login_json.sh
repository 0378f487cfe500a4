#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Login bodies other than a urlencoded form, through the shipped
# haproxy.cfg. It read the username from X-Login-User or a form only: a
# JSON login ({"username":"victim",...}), the body of most login APIs,
# had no username, so each attempt counted under the client's address
# alone, and one account sprayed from many addresses had no per-account
# limit. Bodies of any other type (multipart, text/plain, none,
# compressed) passed the same way.
#   - JSON (application/json, any case, charset=utf-8, */*+json): counted
#     under its top-level "username" string, lower-cased, \u escapes of
#     ASCII decoded: 2 failures from 2 addresses, then 429 from a third;
#   - a username key twice (also in another case, with \u escapes, 'ſ'),
#     or beside X-Login-User: 400 repeated_identity;
#   - a username that is not a top-level string json_query() reads
#     (a number, an array, nested, \u00e9), or a JSON username in a body
#     labelled a form: 400 unreadable_username;
#   - a body of another type, none, two types, a charset other than
#     UTF-8, or a Content-Encoding: 415; a NUL byte in a form or JSON
#     body (the regexes stop at it, the application does not): 400;
#   - JSON past the buffer 413, chunked 411, as for forms; a 3,000-byte
#     username is counted on 2.6 too (PCRE's JIT stack);
#   - a form with a type in capitals and charset=UTF-8 is still counted,
#     and a bodiless POST with X-Login-User is still a login.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

login_stack skip

J='Content-Type: application/json'
jlogin() {	# jlogin ADDR BODY [CURL ARGS...]: one JSON POST /login from ADDR
	_a=$1; _b=$2; shift 2
	req --interface "$_a" -X POST -H "$J" "$@" --data-binary "$_b" "$URL/login"
}
tlogin() {	# tlogin TYPE BODY: one POST /login with Content-Type TYPE
	req -X POST -H "Content-Type: $1" --data-binary "$2" "$URL/login"
}
err() { sed -n 's/.*"error":"\([a-z_]*\)".*/\1/p' "$TMP/b"; }

# ---- JSON is counted under its username ----------------------------------------
codes=""
for n in 1 2 3; do codes="$codes $(jlogin 127.0.2.$n '{"username":"victim","password":"x"}')"; done
expect_eq "$codes" " 401 401 429" \
	"JSON logins of victim from 3 addresses: 2 failures, then 429 (login-account)"
expect_eq "$(jlogin 127.0.2.4 '{"password":"x","username":"Vic\u0074im"}' -H 'X-Login-Password: letmein')" 429 \
	"victim spelt Vic\\u0074im, from a 4th address, with the right password: 429"
codes="$(tlogin 'Application/JSON; Charset="UTF-8"' '{"username":"alice","password":"x"}')"
codes="$codes $(tlogin application/vnd.api+json $'{\n  "username" :\n  "ALICE",\n  "password": "x"\n}\n')"
codes="$codes $(tlogin 'application/json;charset=utf8' '{"username":"alice"}')"
expect_eq "$codes" "401 401 429" \
	"Application/JSON; Charset=\"UTF-8\", pretty-printed +json, charset=utf8: one account alice"
long=$(head -c 3000 /dev/zero | tr '\0' l)
codes=""
for i in 1 2 3; do codes="$codes $(jlogin 127.0.0.1 "{\"username\":\"$long\"}")"; done
expect_eq "$codes" " 401 401 429" \
	"a 3,000-character username (past PCRE's JIT stack for a repeated group, on 2.6): counted"
codes=""
for i in 1 2 3; do codes="$codes $(jlogin 127.0.0.1 '{"password":"x"}' -H 'X-Login-User: bob')"; done
expect_eq "$codes" " 401 401 429" "JSON without a username, X-Login-User bob: counted under bob"

# ---- an account named twice, or in another spelling: 400 -------------------------
codes=""
for body in '{"username":"r1","username":"victim"}' '{"username":"r2","USERNAME":"victim"}' \
	'{"username":"r3","a":1,"UserName" :"victim"}' '{"user\u006eame":"victim"}' \
	'{"\u0055sername":"victim"}' '{"uſername":"victim"}' '{"u\u017fername":"victim"}' \
	$'{"username":"r4",\n"username"\n:"victim"}' "{username:'victim'}"; do
	codes="$codes $(jlogin 127.0.0.1 "$body")"
done
expect_eq "$codes" " 400 400 400 400 400 400 400 400 400" \
	"username twice (any case, escaped, ſ, past a newline), or in a spelling json_query does not read: 400"
expect_eq "$(err)" repeated_identity "... repeated_identity"
expect_eq "$(jlogin 127.0.0.1 '{"username":"victim","password":"x"}' -H 'X-Login-User: r5')" 400 \
	"X-Login-User and a JSON username together: 400"
expect_eq "$(jlogin 127.0.0.1 '{"username":"victim","password":"x"}' -H 'X-Login-User;')" 400 \
	"an empty X-Login-User and a JSON username: 400"

# ---- a username json_query cannot read as the application does: 400 ---------------
codes=""
for body in '{"username":123}' '{"username":["victim"]}' '{"username":{"n":"victim"}}' \
	'{"username":null}' '{"a":{"username":"victim"}}' '{"username":"caf\u00e9"}' \
	'{"username":"vic\/tim"}' '[{"username":"victim"}]' '{"username":"victim'; do
	codes="$codes $(jlogin 127.0.0.1 "$body")"
done
expect_eq "$codes" " 400 400 400 400 400 400 400 400 400" \
	"a username not a top-level string json_query reads (number, array, object, null, nested, \\u00e9, \\/, unparsed): 400"
expect_eq "$(err)" unreadable_username "... unreadable_username"
expect_eq "$(req -X POST -d '{"username":"victim","password":"x"}' "$URL/login")" 400 \
	"JSON sent as a form (curl -d): 400"

# ---- bodies the limits cannot read: 415, 400 --------------------------------------
printf -- '--b\r\nContent-Disposition: form-data; name="username"\r\n\r\nvictim\r\n--b--\r\n' >"$TMP/mp"
codes="$(req -X POST -H 'Content-Type: multipart/form-data; boundary=b' --data-binary @"$TMP/mp" "$URL/login")"
codes="$codes $(req -X POST -F username=victim -F password=x "$URL/login")"
codes="$codes $(req -X POST -H 'Content-Type: text/plain' --data-binary '{"username":"victim"}' "$URL/login")"
codes="$codes $(req -X POST -H 'Content-Type:' --data-binary '{"username":"victim"}' "$URL/login")"
codes="$codes $(req -X POST -H "$J" -H 'Content-Type: text/plain' --data-binary '{"username":"victim"}' "$URL/login")"
codes="$codes $(req -X POST -H 'Content-Type: application/json, text/plain' --data-binary '{"username":"victim"}' "$URL/login")"
codes="$codes $(req -X POST -H 'Content-Type: application/json; charset=utf-16' --data-binary '{"username":"victim"}' "$URL/login")"
codes="$codes $(req -X POST -H 'Content-Type: application/x-www-form-urlencoded; charset=ibm037' --data-binary 'username=victim' "$URL/login")"
printf '{"username":"victim"}' | gzip >"$TMP/gz"
codes="$codes $(req -X POST -H "$J" -H 'Content-Encoding: gzip' --data-binary @"$TMP/gz" "$URL/login")"
codes="$codes $(req -X POST -H 'Content-Type: application/jsonx' --data-binary '{"username":"victim"}' "$URL/login")"
expect_eq "$codes" "415 415 415 415 415 415 415 415 415 415" \
	"multipart (2), text/plain, no type, two types, a list, UTF-16, IBM037, gzip, jsonx: 415"
expect_eq "$(err)" unsupported_login_body "... unsupported_login_body"
printf 'username=r6&x=\0&username=victim' >"$TMP/nul_form"
printf '{"username":"r7","p":"\0","username":"victim"}' >"$TMP/nul_json"
codes="$(req -X POST --data-binary @"$TMP/nul_form" "$URL/login")"
codes="$codes $(req -X POST -H "$J" --data-binary @"$TMP/nul_json" "$URL/login")"
expect_eq "$codes" "400 400" "a NUL byte before a second username, in a form or JSON: 400"
expect_eq "$(err)" bad_login_body "... bad_login_body"

# ---- as for forms: 413 past the buffer, 411 chunked ---------------------------------
pad=$(head -c 20000 /dev/zero | tr '\0' a)
expect_eq "$(req -X POST -H "$J" --data-binary "{\"pad\":\"$pad\",\"username\":\"victim\"}" "$URL/login")" 413 \
	"JSON padded past the buffer, username last: 413"
expect_eq "$(req -X POST -H "$J" -H 'Transfer-Encoding: chunked' --data-binary '{"username":"victim"}' "$URL/login")" 411 \
	"chunked JSON: 411"
expect_eq "$(grep -c 'be_app/app1' "$TMP/haproxy.log")" 8 \
	"no refused request reached the application (only the 8 failures of victim, alice, the long name and bob did)"

# ---- what was accepted still is ------------------------------------------------------
codes=""
for i in 1 2 3; do
	codes="$codes $(req -X POST -H 'Content-Type: APPLICATION/X-WWW-FORM-URLENCODED; charset=UTF-8' \
		--data-binary 'username=Carol&password=x' "$URL/login")"
done
expect_eq "$codes" " 401 401 429" "a form typed in capitals with charset=UTF-8: carol's 2 failures, then 429"
codes=""
for i in 1 2 3; do
	codes="$codes $(req -X POST -H 'Content-Type: multipart/form-data; boundary=b' -H 'X-Login-User: dave' "$URL/login")"
done
expect_eq "$codes" " 401 401 429" "a POST without a body (any type) and X-Login-User dave: counted under dave"
expect_eq "$(jlogin 127.0.0.1 '{"username":"erin","password":"x","confirm_username":"erin","note":"a\"username\":b"}')" 401 \
	"a key ending in username, and \"username\": inside a string value, are not a second username"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"
! grep -qE '" 5[0-9][0-9] |fe_api [^ ]+ [^ ]+ 5[0-9][0-9] ' "$TMP/haproxy.log"
ok $? "no 5xx"

finish
