# SPDX-License-Identifier: Apache-2.0
# The admin surface: `key show|reset` on the command line and over HTTP
# (/admin/keys, /admin/key), its token (401 without it or with a wrong
# one, never in a log line), bad input (4xx / exit 2, the agent serving
# on), and a pool of three agents that all see one reset within 1 s,
# near-caches included.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AM=$(port 9)
start_redis "$RP"
TOKEN="s3cret-token-$(date +%s)-abcdef"
printf '%s\n' "$TOKEN" >"$TMP/token"
pool_policy() {	# AGENT_PORT [ADMIN]
	cat <<YAML
listen: 127.0.0.1:$1
workers: 1	# one near-cache per agent: the pool test floods it
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms }
processing_timeout: 1s
log: { level: debug }
rules:
  - { name: login, message: rl-request, key: "u:{user}", rate: 2/h, burst: 2, missing: skip }
  - { name: guard, message: rl-guard, key: "g:{user}", rate: 5/h, burst: 5 }
  - { name: top, message: rl-top, key: "t:{user}", rate: 1/h, burst: 1 }
  - { name: a-gcra, message: rl-a-gcra, key: "k:{k}", algorithm: gcra, rate: 10/h, burst: 10 }
  - { name: a-token-bucket, message: rl-a-token-bucket, key: "k:{k}", algorithm: token-bucket, rate: 10/h, burst: 10 }
  - { name: a-leaky-bucket, message: rl-a-leaky-bucket, key: "k:{k}", algorithm: leaky-bucket, rate: 10/h, burst: 10 }
  - { name: a-fixed-window, message: rl-a-fixed-window, key: "k:{k}", algorithm: fixed-window, limit: 10, window: 1h }
  - { name: a-sliding-window, message: rl-a-sliding-window, key: "k:{k}", algorithm: sliding-window, limit: 10, window: 1h }
  - { name: a-sliding-log, message: rl-a-sliding-log, key: "k:{k}", algorithm: sliding-log, limit: 10, window: 1h }
  - { name: a-concurrency, message: rl-a-concurrency, key: "k:{k}", algorithm: concurrency, limit: 10, lease: 10m, id: "{id}", release: rl-a-done }
  - { name: quota, message: rl-request, key: "q:{tenant}:{ip}", algorithm: fixed-window, limit: 5, window: 1h, missing: skip }
YAML
	[ -n "${2:-}" ] && echo "admin: { listen: \"127.0.0.1:$2\", token_file: \"$TMP/token\" }"
}
A1=$(port 2); A2=$(port 3); A3=$(port 4)
pool_policy "$A1" "$AM" >"$TMP/p1.yaml"
AM2=$(port 10)
pool_policy "$A2" "$AM2" >"$TMP/p2.yaml"
pool_policy "$A3" >"$TMP/p3.yaml"
AGENT_LOG="$TMP/agent1.log" agent_up "$TMP/p1.yaml"
A1_PID=$AGENT_PID
AGENT_LOG="$TMP/agent2.log" agent_up "$TMP/p2.yaml"
AGENT_LOG="$TMP/agent3.log" agent_up "$TMP/p3.yaml"
until_ok 50 listening "127.0.0.1:$AM"; ok $? "the admin API listens on admin.listen"
KEY() { "$AGENT" key "$@"; }

# ---- the policy: off unless a token; -c warns off loopback ---------------
printf 'admin: { listen: "0.0.0.0:%s", token_file: "%s" }\nrules: []\n' "$AM" "$TMP/token" >"$TMP/open.yaml"
"$AGENT" -c -f "$TMP/open.yaml" >/dev/null 2>"$TMP/c.err"; expect_eq "$?" 0 "-c accepts an admin API off loopback..."
grep -q 'admin.listen: 0.0.0.0:.* is not a loopback address' "$TMP/c.err"; ok $? "... with a warning"
printf 'admin: { listen: "127.0.0.1:%s" }\nrules: []\n' "$AM" >"$TMP/notoken.yaml"
"$AGENT" -c -f "$TMP/notoken.yaml" >/dev/null 2>"$TMP/c.err"; expect_eq "$?" 1 "an admin: block without a token is refused"
printf 'admin: { token_env: RL_NO_SUCH_VAR }\nrules: []\n' >"$TMP/noenv.yaml"
"$AGENT" -c -f "$TMP/noenv.yaml" >/dev/null 2>&1; expect_eq "$?" 1 "token_env naming an unset variable is refused"
printf 'tinytok\n' >"$TMP/short"
printf 'admin: { token_file: "%s" }\nrules: []\n' "$TMP/short" >"$TMP/short.yaml"
"$AGENT" -c -f "$TMP/short.yaml" >/dev/null 2>"$TMP/c.err"; expect_eq "$?" 1 "a token under 16 bytes is refused"
! grep -q tinytok "$TMP/c.err"; ok $? "... without echoing it"
! curl -s --max-time 1 "http://127.0.0.1:$(port 11)/admin/top" >/dev/null 2>&1
ok $? "no admin: block, no admin listener"

# ---- the CLI -------------------------------------------------------------
"$CLIENT" -a "127.0.0.1:$A1" -n 3 rl-request user=s:alice >"$TMP/alice"
KEY show -f "$TMP/p1.yaml" login user=alice >"$TMP/show" 2>&1
expect_eq "$(sed -n 's/^remaining: *\([0-9]*\).*/\1/p' "$TMP/show")" 0 \
	"key show: after 2 of 2, remaining 0"
grep -q '^key: *rl:{login:u:alice}$' "$TMP/show"; ok $? "key show prints the key the agent charges"
grep -q '^algorithm: *gcra$' "$TMP/show"; ok $? "key show prints the algorithm"
ra=$(field retry_after <"$TMP/alice" | tail -n 1)
sra=$(sed -n 's/^retry_after: *\([0-9]*\)\..*/\1/p' "$TMP/show")
[ -n "$ra" ] && [ "$sra" -ge $((ra - 2)) ] && [ "$sra" -le "$ra" ]
ok $? "key show: retry_after ${sra}s, as the agent's denial said (${ra}s, rounded up)"
grep -q 'raw: *type=string pttl_ms=[0-9]' "$TMP/show"; ok $? "key show prints the raw Redis state"
KEY show --json -f "$TMP/p1.yaml" login user=alice >"$TMP/show.json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["rule"]=="login" and d["remaining"]==0 and d["allowed"] is False and d["raw"]["type"]=="string", d' "$TMP/show.json"
ok $? "key show --json is JSON with the same numbers"
"$CLIENT" -a "127.0.0.1:$A1" -n 2 rl-request tenant=s:acme ip=s:10.1.2.3 >/dev/null
KEY show --json -f "$TMP/p1.yaml" quota tenant=acme ip=10.1.2.3 >"$TMP/fw.json"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["algorithm"]=="fixed-window" and d["limit"]==5 and d["remaining"]==3, d' "$TMP/fw.json"
ok $? "fixed window: show says 3 of 5 left after 2 (an IP given as text keys as HAProxy's address)"
# every algorithm: after 3 requests, show's remaining is what the agent's
# own answer to the third said was left
for alg in gcra token-bucket leaky-bucket fixed-window sliding-window sliding-log concurrency; do
	for id in a b c; do
		"$CLIENT" -a "127.0.0.1:$A1" "rl-a-$alg" k=s:x "id=s:$id"
	done >"$TMP/alg.$alg"
	want=$(field remaining <"$TMP/alg.$alg" | tail -n 1)
	KEY show --json -f "$TMP/p1.yaml" "a-$alg" k=x >"$TMP/alg.json"
	got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["remaining"])' "$TMP/alg.json")
	expect_eq "$got" "$want" "$alg: key show says $want left, as the agent's last answer did"
done
KEY reset -f "$TMP/p1.yaml" login user=alice >"$TMP/reset"; rc_=$?
expect_eq "$rc_:$(cat "$TMP/reset")" "0:login rl:{login:u:alice}: reset" "key reset deletes the key"
expect_eq "$("$CLIENT" -a "127.0.0.1:$A1" rl-request user=s:alice | field status)" 0 \
	"after the reset the next request passes"
KEY reset -f "$TMP/p1.yaml" 'rl:{login:u:alice}' >/dev/null; ok $? "reset takes the key as logs print it"
expect_eq "$(rc "$RP" exists 'rl:{login:u:alice}')" 0 "... and deletes it"
KEY show -f "$TMP/p1.yaml" nosuch user=x 2>"$TMP/err"; expect_eq "$?" 2 "unknown rule: exit 2"
grep -q "unknown rule 'nosuch'" "$TMP/err"; ok $? "... with one clear line"
KEY show -f "$TMP/p1.yaml" login user=x extra=y 2>/dev/null; expect_eq "$?" 2 "an arg the key does not use: exit 2"
KEY show -f "$TMP/p1.yaml" login 2>"$TMP/err"; expect_eq "$?" 2 "a missing arg: exit 2"
grep -q "missing arg" "$TMP/err"; ok $? "... saying which key it needs"
KEY show -f "$TMP/p1.yaml" login "user=$(head -c 100000 /dev/zero | tr '\0' a)" >"$TMP/big"
ok $? "a 100 kB value (argv takes 128 kB at most) is hashed into a key, as the agent does"
grep -q '^key: *rl:{login:u:a*~[0-9a-f]\{32\}}$' "$TMP/big"; ok $? "... the key ends with its hash"

# ---- HTTP: the token ------------------------------------------------------
U="http://127.0.0.1:$AM"
code() { curl -s -o "$TMP/body" -w '%{http_code}' --max-time 5 "$@"; }
expect_eq "$(code "$U/admin/keys/login?user=alice")" 401 "no token: 401"
expect_eq "$(code -H 'Authorization: Bearer wrong-token-wrong-token' "$U/admin/keys/login?user=alice")" 401 "wrong token: 401"
AUTH="Authorization: Bearer $TOKEN"
expect_eq "$(code -H "$AUTH" "$U/admin/keys/login?user=alice")" 200 "right token: 200"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["key"]=="rl:{login:u:alice}" and "remaining" in d, d' "$TMP/body"
ok $? "GET /admin/keys/RULE?ARG=VALUE answers the key as JSON"
expect_eq "$(code -H "$AUTH" "$U/admin/key?key=rl%3A%7Blogin%3Au%3Aalice%7D")" 200 "GET /admin/key?key=RAWKEY: 200"
expect_eq "$(code -H "$AUTH" "$U/admin/keys/nosuch?user=a")" 404 "unknown rule: 404"
# the rule of the path is the client's: it cannot forge the audit line's
# fields, nor push result= and status= out of a cut line
expect_eq "$(code -H "$AUTH" "$U/admin/keys/x%20result=deleted%20status=200%22?user=a")" 404 "a rule name with spaces: 404"
expect_eq "$(code -H "$AUTH" "$U/admin/keys/$(head -c 1500 /dev/zero | tr '\0' r)?user=a")" 404 "a 1500-byte rule name: 404"
sleep 0.2
! grep -q 'msg=admin action=key_show rule=x result=deleted' "$TMP/agent1.log"
ok $? "... the audit line escapes the rule it was given"
grep -q 'msg=admin action=key_show rule=x\\x20result=deleted\\x20status=200\\x22 key="" result=bad_request status=400$' "$TMP/agent1.log"
ok $? "... and says what it refused"
grep -q "msg=admin action=key_show rule=$(head -c 64 /dev/zero | tr '\0' r) key=\"\" result=bad_request status=400 truncated=1\$" "$TMP/agent1.log"
ok $? "... a long one keeps the result and the status on its line"
# a key of 150 blanks is 600 bytes escaped: the line cuts it at 480, and
# said nothing of it before
expect_eq "$(code -H "$AUTH" "$U/admin/keys/login?user=x$(printf '%%20%.0s' $(seq 150))")" 200 "a key of 150 blanks: 200"
sleep 0.2
grep -q 'msg=admin action=key_show rule=login key="rl:{login:u:x\(\\x20\)*" result=shown status=200 truncated=1$' "$TMP/agent1.log"
ok $? "... its audit line cuts the key and says so (truncated=1), result and status whole"
grep -q 'msg=admin action=key_show rule=login key="rl:{login:u:alice}" result=shown status=200$' "$TMP/agent1.log"
ok $? "... a key that fits: no truncated=1"
expect_eq "$(code -H "$AUTH" "$U/admin/keys/login?user=a&bogus=1")" 400 "extra arg: 400"
expect_eq "$(code -H "$AUTH" "$U/admin/keys/login")" 400 "missing arg: 400"
expect_eq "$(code -H "$AUTH" "$U/admin/keys/login?user=%zz")" 400 "bad percent-encoding: 400"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert "percent" in d["error"], d' "$TMP/body"
ok $? "... with a clear error line"
expect_eq "$(code -H "$AUTH" -X POST "$U/admin/keys/login?user=a")" 405 "POST: 405"
curl -s -D - -o /dev/null --max-time 5 -H "$AUTH" -X POST "$U/admin/keys/login?user=a" | grep -qi '^Allow: GET, DELETE'
ok $? "... with Allow: GET, DELETE"
expect_eq "$(code -H "$AUTH" "$U/admin/keys/login?user=$(head -c 5000 /dev/zero | tr '\0' a)")" 400 "a huge target: 400"
expect_eq "$(code "$U/metrics")" 200 "the admin listener also answers /metrics"
expect_eq "$("$CLIENT" -a "127.0.0.1:$A1" rl-request user=s:bob | field status)" 0 \
	"the agent keeps serving after all that"

# ---- the pool: one reset, seen by three agents within 1 s ------------------
# guard: burst 5, so that each of the three agents may pass once after it
"$CLIENT" -a "127.0.0.1:$A1" -n 5 rl-guard user=s:carol >/dev/null
for a in "$A1" "$A2" "$A3"; do
	"$CLIENT" -a "127.0.0.1:$a" -n 4 rl-guard user=s:carol >"$TMP/held.$a"
done
expect_eq "$(cat "$TMP"/held.* | field status | sort -u)" 429 "carol is denied on all three agents"
# 2.2 s of steady denials on every agent since each learned carol's
# denial (the step above), then the reset: an agent holding a denial for
# the old 2 s would have learned it again 0.2 s before the reset, and pass
# carol only 1.8 s after it
before=$(script_calls "$RP")
fpids=""
for a in "$A1" "$A2" "$A3"; do
	"$CLIENT" -a "127.0.0.1:$a" -n 400 -g 10 rl-guard user=s:carol >"$TMP/flood.$a" &
	fpids="$fpids $!"
done
sleep 2.2
after=$(script_calls "$RP")
[ $((after - before)) -lt 100 ]; ok $? "... and answered from the near-caches ($((after - before)) script calls in 2.2 s)"
kill $fpids 2>/dev/null; wait $fpids 2>/dev/null	# they would spend the reset
t0=$(now_ms)
st=$(code -X DELETE -H "$AUTH" "$U/admin/keys/guard?user=carol")
passes_on() { [ "$("$CLIENT" -a "127.0.0.1:$1" rl-guard user=s:carol | field status)" = 0 ]; }
# round robin over the agents still denying; a denial charges nothing,
# so each agent's one pass takes one of the burst's 5
left="$A1 $A2 $A3"
while [ -n "$left" ] && [ $(( $(now_ms) - t0 )) -lt 3000 ]; do
	still=""
	for a in $left; do
		if passes_on "$a"; then eval "at_$a=$(( $(now_ms) - t0 ))"
		else still="$still $a"; fi
	done
	left=$still
done
expect_eq "$st" 200 "DELETE /admin/keys/guard?user=carol: 200"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["deleted"]==1, d' "$TMP/body"
ok $? "... deleted the key"
for a in "$A1" "$A2" "$A3"; do
	eval "ms=\${at_$a:-9999}"
	[ "$ms" -le 1000 ]; ok $? "agent on $a passes carol within 1 s of the reset (${ms} ms)"
done

# ---- top: a flood among 10,000 quiet keys, merged over two agents ---------
# Each quiet key passes once, then is denied once (the second round of the
# same ".I" names); the flood key is denied 1999 times on each of two
# agents that both publish (admin: on both).
for round in 1 2; do
	"$CLIENT" -a "127.0.0.1:$A1" -n 10000 -P 64 -u rl-top user=s:quiet >/dev/null
done
"$CLIENT" -a "127.0.0.1:$A1" -n 2000 -P 64 rl-top user=s:flood >/dev/null
"$CLIENT" -a "127.0.0.1:$A2" -n 2000 -P 64 rl-top user=s:flood >/dev/null
top_ready() {
	"$AGENT" top --json -f "$TMP/p1.yaml" -n 3 top >"$TMP/top.json" 2>"$TMP/top.err" &&
	python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(d["agents"] != 2 or d["denied"] != 13999)' "$TMP/top.json"
}
# each agent publishes once a second: wait for views taken after the flood
until_ok 50 top_ready; ok $? "spoa-ratelimit top reads both agents' summaries, all 13,999 denials ($(cat "$TMP/top.json" | head -c 80))"
python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
k = d["keys"]
assert k[0]["key"] == "rl:{top:t:flood}", k
assert 3999 - k[0]["error"] <= 3999 <= k[0]["denied"], k[0]
# the others: Space-Saving overcounts a late key by at most its error
assert len(k) == 3 and all(x["denied"] - x["error"] <= 1 for x in k[1:]), k
assert d["denied"] == 13999, d
' "$TMP/top.json"
ok $? "the flood key is first, its count merged over the agents (3999), and all 13,999 denials counted"
"$AGENT" top -f "$TMP/p1.yaml" -n 1 top >"$TMP/top.txt"
grep -q '^ *[0-9]*  rl:{top:t:flood}$' "$TMP/top.txt"; ok $? "top as text: one line, the flood key"
bad_n=""
for n in 5x "" 0 1001 3.5; do
	"$AGENT" top -f "$TMP/p1.yaml" -n "$n" top >/dev/null 2>"$TMP/top.err"
	rc=$?
	[ "$rc" = 2 ] && grep -q 'bad option' "$TMP/top.err" || bad_n="$bad_n '$n':$rc"
done
expect_eq "$bad_n" "" "top -n takes a whole count of 1 to 1000: 5x, '', 0, 1001, 3.5 are bad usage (exit 2)"
expect_eq "$(code -H "$AUTH" "$U/admin/top?rule=top&n=2")" 200 "GET /admin/top: 200"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["keys"][0]["key"]=="rl:{top:t:flood}" and len(d["keys"])==2, d' "$TMP/body"
ok $? "... with the flood key first, n keys at most"
expect_eq "$(code -H "$AUTH" "$U/admin/top?rule=nosuch")" 404 "top of an unknown rule: 404"
expect_eq "$(code -H "$AUTH" "$U/admin/top?rule=top&n=0")" 400 "n=0: 400"
grep -q 'msg=admin action=top rule=nosuch key="" result=unknown_rule status=404$' "$TMP/agent1.log" &&
	grep -q 'msg=admin action=top rule=top key="" result=bad_request status=400$' "$TMP/agent1.log"
ok $? "top's 404 and 400 are logged like every admin action"
! curl -s --max-time 2 "http://127.0.0.1:$AM/metrics" | grep -q flood
ok $? "keys never become metric labels"

# ---- a reload reads the token again ------------------------------------
NEW="rotated-token-$(date +%s)-ghijkl"
printf '%s\n' "$NEW" >"$TMP/token"
kill -HUP "$A1_PID"
reloaded() { grep -q 'msg=reloaded' "$TMP/agent1.log"; }
until_ok 50 reloaded; ok $? "SIGHUP reloads the policy"
expect_eq "$(code -H "$AUTH" "$U/admin/top?rule=top")" 401 "after a reload the old token is refused"
expect_eq "$(code -H "Authorization: Bearer $NEW" "$U/admin/top?rule=top")" 200 "... and the new one taken"

# ---- the audit log and the token ----------------------------------------------
grep -q 'msg=admin action=key_reset rule=guard key="rl:{guard:g:carol}" result=deleted status=200' "$TMP/agent1.log"
ok $? "the reset is logged at info: action, rule, key, result"
grep -q 'msg=admin action=auth .*result=unauthorized status=401' "$TMP/agent1.log"
ok $? "a refused token is logged"
! grep -rqF -e "$TOKEN" -e "$NEW" "$TMP"/agent*.log; ok $? "no token appears in any log line"
finish
