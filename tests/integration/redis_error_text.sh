#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A Redis error reply is the server's text, logged by the agent. RESP ends
# an error at CRLF, so a bare LF, a quote or any byte can be inside it:
# a hostile or broken server (or a proxy in front of Redis) could end the
# logged value, forge a log line of its own, or flood a line. Each such
# text is now escaped, kept to 200 bytes, and a cut one says truncated=1.
#
# The fake Redis here answers every command with one such error.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
python3 - "$RP" >"$TMP/fake.log" 2>&1 <<'PY' &
import socket, sys, threading, time
EVIL = (b'-ERR evil"q\nts=x level=error msg=forged ' + b'A' * 300 + b'\r\n')
def serve(c):
    buf = b''
    c.settimeout(30)
    try:
        while True:
            d = c.recv(65536)
            if not d:
                return
            buf += d
            # one reply per RESP array read whole
            while buf.startswith(b'*'):
                end = buf.find(b'\r\n')
                if end < 0:
                    break
                n, i = int(buf[1:end]), end + 2
                for _ in range(n):
                    e = buf.find(b'\r\n', i)
                    if e < 0:
                        break
                    i = e + 2 + int(buf[i + 1:e]) + 2
                else:
                    if i <= len(buf):
                        buf = buf[i:]
                        c.sendall(EVIL)
                        continue
                break
    except OSError:
        pass
    finally:
        c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', int(sys.argv[1])))
s.listen(16)
s.settimeout(1)
print('ready', flush=True)
end = time.time() + 60
while time.time() < end:
    try:
        c, _ = s.accept()
    except socket.timeout:
        continue
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
PIDS="$PIDS $!"
wait_port "$RP"

policy_top "$AP" "redis://127.0.0.1:$RP/0" 50ms 1 >"$TMP/policy.yaml"
cat >>"$TMP/policy.yaml" <<YAML
rules:
  - { name: t, message: rl-request, key: "t:{tenant}", rate: 100/s, burst: 100, fail: open }
YAML
agent_up "$TMP/policy.yaml"
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@"; }
expect_eq "$(c rl-request tenant=s:a | field degraded)" 1 \
	"a Redis answering errors only: the decision takes its fail mode"
logged() { grep -q 'error="ERR evil' "$TMP/agent.log"; }
until_ok 50 logged; ok $? "the server's error text is logged"
grep 'error="ERR evil' "$TMP/agent.log" >"$TMP/lines"
n=$(wc -l <"$TMP/lines")
[ "$n" -gt 0 ] && ! grep -q '^ts=x' "$TMP/agent.log"
ok $? "no line of the server's making ($n lines with its text)"
[ "$n" -gt 0 ] && ! grep -vq 'error="ERR evil\\x22q\\x0ats=x level=error msg=forged AAAA' "$TMP/lines"
ok $? "its quote and LF escaped, its spaces kept, on every line"
[ "$n" -gt 0 ] && ! grep -vq 'A".* truncated=1$' "$TMP/lines"
ok $? "the text is cut and every such line says truncated=1"
long=$(awk '{ print length }' "$TMP/lines" | sort -n | tail -1)
[ "${long:-0}" -gt 0 ] && [ "$long" -lt 600 ]
ok $? "no line carries the whole text (${long:-0} bytes at most)"
finish
