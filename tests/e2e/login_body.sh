#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A login form the limits cannot read whole, through the shipped
# haproxy.cfg. req.body_param() sees only what fits in HAProxy's buffer:
# a form padded past it, its username at the end, reached the
# application (which reads the whole form) while the login limit saw no
# name and counted the attempt under the address alone.
#   - a form larger than the buffer holds: 413, never the application;
#   - a chunked form: 411;
#   - a form that arrives slower than the 1 s wait-for-body: HAProxy's 408;
#   - a form that fits (padding included) is counted under its username:
#     2 failures, then 429.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

login_stack skip

pad=$(head -c 20000 /dev/zero | tr '\0' a)
expect_eq "$(req -X POST --data-binary "pad=$pad&username=victim&password=x" "$URL/login")" 413 \
	"a form padded past the buffer, username last: 413"
expect_eq "$(req -X POST -H 'Transfer-Encoding: chunked' --data-binary 'username=victim&password=x' "$URL/login")" 411 \
	"a chunked form: 411"

# Half a form, then a pause past the 1 s wait: HAProxy answers 408.
code=$(python3 - "$HAP_PORT" <<'EOF'
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
body = b"password=x&username=victim"
s.sendall(b"POST /login HTTP/1.1\r\nHost: x\r\nContent-Type: "
          b"application/x-www-form-urlencoded\r\nContent-Length: %d\r\n\r\n"
          % len(body) + body[:11])
time.sleep(1.5)
try:
    s.sendall(body[11:])
    print(s.recv(64).split(b" ")[1].decode())
except OSError:
    print("reset")
EOF
)
expect_eq "$code" 408 "half a form, then a pause past the wait: 408"
expect_eq "$(grep -c 'be_app/app1' "$TMP/haproxy.log")" 0 "none of them reached the application"

pad=$(head -c 4000 /dev/zero | tr '\0' a)
codes=""
for i in 1 2 3; do
	codes="$codes $(req -X POST --data-binary "pad=$pad&username=victim&password=x" "$URL/login")"
done
expect_eq "$codes" " 401 401 429" "a padded form that fits: victim's 2 failures, then 429"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"

finish
