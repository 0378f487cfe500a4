# SPDX-License-Identifier: Apache-2.0
# Request framing on the admin API's HTTP responder (httpd.c), RFC 9112
# sections 2.2, 5 and 6: it reads no request bodies, so a request that
# declares one, or whose framing is unclear, is refused before any route
# runs, and the connection is closed after the one answer. Before, the
# head ended at the last "\r\n\r\n" in the buffer (so lines after an
# earlier bare-LF blank line, an Authorization say, were read as headers),
# "\n\r\n" was never seen as an end (a hang to the timeout), and
# Transfer-Encoding, bodies and bad Content-Length were ignored: a
# chunked DELETE reset the key with a 200.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); AM=$(port 3)
TOKEN="s3cret-token-$(date +%s)-abcdef"
printf '%s\n' "$TOKEN" >"$TMP/token"
start_redis "$RP"
policy_top "$AP" "redis://127.0.0.1:$RP/0" 100ms 1 >"$TMP/p.yaml"
cat >>"$TMP/p.yaml" <<YAML
processing_timeout: 1s
admin: { listen: "127.0.0.1:$AM", token_file: "$TMP/token" }
rules:
  - { name: login, message: rl-request, key: "u:{user}", rate: 2/h, burst: 2 }
YAML
agent_up "$TMP/p.yaml"
until_ok 50 listening "127.0.0.1:$AM"; ok $? "the admin API listens"

# raw BYTES: sends BYTES (\r, \n, \t, \xHH as in Python) on one
# connection, keeps it open, and prints "STATUS ANSWERS SECONDS": the
# first answer's status ("none" if none), how many answers came (the
# count of status lines) and how long until the agent closed.
raw() {
	python3 - "$AM" "$1" <<'PY'
import socket, sys, time
data = sys.argv[2].encode('latin1').decode('unicode_escape').encode('latin1')
s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=8)
t = time.time()
s.sendall(data)
buf = b''
try:
    while True:
        b = s.recv(65536)
        if not b:
            break
        buf += b
except OSError:
    pass
st = buf.split(b' ')[1].decode() if buf.startswith(b'HTTP/1.1 ') else 'none'
print(st, buf.count(b'HTTP/1.1 '), '%.0f' % (time.time() - t))
PY
}
AUTH="Authorization: Bearer $TOKEN"
K='/admin/keys/login?user=alice'
charge() { "$CLIENT" -a "127.0.0.1:$AP" -n 1 rl-request user=s:alice >/dev/null; }
present() { [ "$(rc "$RP" exists 'rl:{login:u:alice}')" = 1 ]; }
charge
present; ok $? "the key exists in Redis"

# ---- Transfer-Encoding: 501 (HTTP/1.1), 400 (HTTP/1.0, or with a length)
expect_eq "$(raw "DELETE $K HTTP/1.1\r\n$AUTH\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")" \
	"501 1 0" "a chunked DELETE: 501, one answer, closed at once"
present; ok $? "... and the key is not reset"
! grep -q 'action=key_reset' "$TMP/agent.log"; ok $? "... nor audited as one"
expect_eq "$(raw "GET $K HTTP/1.1\r\n$AUTH\r\ntransfer-encoding: gzip\r\n\r\n")" \
	"501 1 0" "any transfer coding (gzip, lower-case name): 501"
expect_eq "$(raw "GET $K HTTP/1.1\r\n$AUTH\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")" \
	"400 1 0" "Transfer-Encoding with Content-Length (smuggling): 400"
expect_eq "$(raw "GET $K HTTP/1.0\r\n$AUTH\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")" \
	"400 1 0" "Transfer-Encoding in HTTP/1.0 (faulty framing): 400"
expect_eq "$(raw "GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")" \
	"501 1 0" "/metrics too: 501"

# ---- Content-Length ------------------------------------------------------
expect_eq "$(raw "DELETE $K HTTP/1.1\r\n$AUTH\r\nContent-Length: 5\r\n\r\nhello")" \
	"413 1 0" "a body (Content-Length: 5): 413, nothing reads it"
present; ok $? "... and the key is not reset"
expect_eq "$(raw "DELETE $K HTTP/1.1\r\n$AUTH\r\nContent-Length: 10\r\n\r\nabc")" \
	"413 1 0" "a body shorter than its length, then idle: 413 at once, no wait"
for v in abc -1 +1 '' ' ' 1.0 0x10 '5, 5' 99999999999999999999999; do
	expect_eq "$(raw "GET $K HTTP/1.1\r\n$AUTH\r\nContent-Length: $v\r\n\r\n")" \
		"400 1 0" "Content-Length '$v': 400"
done
expect_eq "$(raw "GET $K HTTP/1.1\r\n$AUTH\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n")" \
	"400 1 0" "two Content-Length lines, even equal: 400"
expect_eq "$(raw "GET $K HTTP/1.1\r\n$AUTH\r\ncontent-length: 0\r\nContent-Length: 7\r\n\r\n")" \
	"400 1 0" "two conflicting Content-Length lines: 400"
expect_eq "$(raw "GET $K HTTP/1.1\r\n$AUTH\r\nContent-Length: 0\r\n\r\n")" \
	"200 1 0" "Content-Length: 0: served"
expect_eq "$(raw "GET $K HTTP/1.1\r\n$AUTH\r\nContent-Length: 00\r\n\r\n")" \
	"200 1 0" "Content-Length: 00 (1*DIGIT): served"

# ---- no pipelining: what follows the head is never a request -------------
expect_eq "$(raw "GET $K HTTP/1.1\r\n$AUTH\r\nContent-Length: 0\r\n\r\nDELETE $K HTTP/1.1\r\n$AUTH\r\n\r\n")" \
	"200 1 0" "a pipelined DELETE after a GET: one answer (the GET's), then closed"
present; ok $? "... and the DELETE never ran"

# ---- header syntax -------------------------------------------------------
expect_eq "$(raw "GET $K HTTP/1.1\r\n$AUTH\r\nContent-Length : 0\r\n\r\n")" \
	"400 1 0" "blank between a field name and its colon: 400"
expect_eq "$(raw "GET $K HTTP/1.1\r\n$AUTH\r\nX-A: 1\r\n Transfer-Encoding: chunked\r\n\r\n")" \
	"400 1 0" "a folded line (obs-fold): 400"
expect_eq "$(raw "GET $K HTTP/1.1\r\n$AUTH\r\nX-A: 1\rContent-Length: 5\r\n\r\n")" \
	"400 1 0" "a bare CR in the head: 400"
expect_eq "$(raw "GET $K HTTP/1.1\r\n$AUTH\r\nX-A: a\x00b\r\n\r\n")" \
	"400 1 0" "a NUL in the head: 400"

# ---- line ends: bare LF accepted (RFC 9112 2.2), never a hang ------------
expect_eq "$(raw "GET $K HTTP/1.1\n$AUTH\n\r\n")" "200 1 0" \
	"a head ending in \\n\\r\\n: served at once"
expect_eq "$(raw "GET $K HTTP/1.1\n$AUTH\n\n")" "200 1 0" \
	"a head ending in \\n\\n: served at once"
expect_eq "$(raw "GET $K HTTP/1.1\r\n$AUTH\r\n\n")" "200 1 0" \
	"a head ending in \\r\\n\\n: served at once"
expect_eq "$(raw "GET /healthz HTTP/1.1\n\r\n")" "200 1 0" \
	"/healthz with no header, \\n\\r\\n: served at once"
expect_eq "$(raw "GET $K HTTP/1.1\nHost: x\n\n$AUTH\r\n\r\n")" "401 1 0" \
	"the head ends at its first blank line: a later Authorization is no header"
expect_eq "$(raw "GET $K HTTP/1.1\r\nHost: x\r\n\r\nContent-Length: 5\r\n\r\n")" "401 1 0" \
	"... nor a later Content-Length"
finish
