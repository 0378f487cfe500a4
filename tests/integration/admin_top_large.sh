# SPDX-License-Identifier: Apache-2.0
# GET /admin/top?n=1000 on a pool large enough to list 1000 keys (40
# agents' views of 32 keys each, as Redis holds them), the keys long and
# made of bytes JSON must escape (a client's non-UTF-8 bytes: 6 bytes
# each): the answer is the keys that fit in the API's 1 MiB, marked
# "truncated", never a 500 with no keys at all.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); AM=$(port 3)
admin_on
redis_agent_up 1 50ms <<YAML
$ADMIN_YAML
rules:
  - { name: login, message: rl-request, key: "u:{user}", rate: 1/h, burst: 1 }
YAML
until_ok 50 listening "127.0.0.1:$AM"; ok $? "the admin API listens"
# views (topview.h) of 40 agents, written now: 32 keys of 200 bytes each.
# A view is read for TOPPOOL_FRESH_MS (3 s) after it is written, so each
# read below writes them again first: on a busy machine the suite's
# steps can take longer than that.
views() {
	python3 - "$RP" <<'PY'
import socket, sys, time
def resp(*a):
    out = b"*%d\r\n" % len(a)
    for x in a:
        x = x if isinstance(x, bytes) else str(x).encode()
        out += b"$%d\r\n%s\r\n" % (len(x), x)
    return out
now = int(time.time() * 1000)
cmds = b""
for agent in range(40):
    view = b"%d %d\n" % (now, 32 * 1000)
    for k in range(32):
        key = b"rl:{login:u:%03d-%02d-" % (agent, k)
        key += b"\xff" * (200 - len(key))
        view += b"%d 0 %d:%s\n" % (1000 - k, len(key), key)
    cmds += resp("HSET", "rl:top:{login}", "agent-%d" % agent, view)
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(cmds)
got = b""
while got.count(b"\r\n") < 40:
    got += s.recv(65536)
print(got.count(b":1\r\n"))
PY
}
expect_eq "$(views)" 40 "40 agents' views written"
code=$(curl -s -o "$TMP/top" -w '%{http_code}' --max-time 10 -H "Authorization: Bearer $TOKEN" \
	"http://127.0.0.1:$AM/admin/top?rule=login&n=1000")
expect_eq "$code" 200 "GET /admin/top?n=1000 answers ($(head -c 120 "$TMP/top"))"
python3 - "$TMP/top" >"$TMP/check" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(d["agents"], len(d["keys"]) > 100, d.get("truncated"))
PY
expect_eq "$(cat "$TMP/check")" "40 True True" "... JSON with the keys that fit, marked truncated"
[ "$(wc -c <"$TMP/top")" -le 1048576 ]; ok $? "... within 1 MiB ($(wc -c <"$TMP/top") bytes)"
views >/dev/null
timeout 10 "$AGENT" top --json -n 1000 -f "$TMP/policy.yaml" login >"$TMP/cli" 2>&1
expect_eq "$?" 0 "top --json -n 1000 on the command line"
python3 - "$TMP/cli" >"$TMP/check" 2>&1 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print(d["agents"], len(d["keys"]) > 100, d.get("truncated"))
PY
expect_eq "$(cat "$TMP/check")" "40 True True" "... prints JSON too, marked truncated (not cut mid-key)"
views >/dev/null
code=$(curl -s -o "$TMP/top20" -w '%{http_code}' --max-time 10 -H "Authorization: Bearer $TOKEN" \
	"http://127.0.0.1:$AM/admin/top?rule=login&n=20")
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(len(d["keys"]), "truncated" in d)' "$TMP/top20" >"$TMP/c20" 2>&1
expect_eq "$code $(cat "$TMP/c20")" "200 20 False" "n=20: 20 keys, not truncated"
finish
