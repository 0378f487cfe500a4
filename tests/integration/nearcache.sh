# Near-cache: a flood on one denied key costs Redis about one call per
# retry interval per worker, not one per request.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
start_redis "$RP"
cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 2
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms }
rules:
  - { name: tenant, message: rl-request, key: "tenant:{tenant}", rate: 1/min, burst: 1 }
YAML
start_agent "$TMP/policy.yaml"
wait_port "$AP"
calls() { script_calls "$RP"; }
before=$(calls)
cpids=""
for i in 1 2 3 4; do
	"$TOOLS/spop-client" -a "127.0.0.1:$AP" -n 1000 -P 20 rl-request tenant=s:flood >"$TMP/out.$i" &
	cpids="$cpids $!"
done
wait $cpids
after=$(calls)
denied=$(cat "$TMP"/out.* | grep -c ' status=429 ')
allowed=$(cat "$TMP"/out.* | grep -c ' status=0 ')
expect_eq "$allowed" 1 "exactly one request of the flood is allowed"
expect_eq "$denied" 3999 "every other request is denied"
n=$((after - before))
echo "# script calls: $n for $denied denied requests"
[ "$n" -le 40 ]; ok $? "script calls per denied request <= 0.01 ($n / $denied)"
# A reload that changes the rule's algorithm (same key, same numbers) is
# decided by Redis under the new algorithm, not by the near-cache's
# denial learned under the old one: one worker, so the request after the
# reload meets the table that learned it.
AP2=$(port 3)
near_policy() {
	cat >"$TMP/near1.yaml" <<YAML
listen: 127.0.0.1:$AP2
workers: 1
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms }
rules:
  - { name: algo, message: rl-request, key: "tenant:{tenant}", algorithm: $1, rate: 1/min, burst: 1 }
YAML
}
near_policy gcra
AGENT_LOG="$TMP/agent-near1.log" start_agent "$TMP/near1.yaml"
wait_port "$AP2"
"$TOOLS/spop-client" -a "127.0.0.1:$AP2" -n 2 rl-request tenant=s:switch >"$TMP/sw1"
expect_eq "$(field status <"$TMP/sw1" | tr '\n' ' ')" "0 429 " \
	"gcra 1/min burst 1: allowed, then denied (and learned)"
near_policy token-bucket
kill -HUP "$AGENT_PID"
n=0
while [ $n -lt 50 ] && ! grep -q 'msg=reloaded' "$TMP/agent-near1.log"; do
	sleep 0.1; n=$((n + 1))
done
"$TOOLS/spop-client" -a "127.0.0.1:$AP2" rl-request tenant=s:switch >"$TMP/sw2"
expect_eq "$(field status <"$TMP/sw2")" 0 \
	"after a reload to token-bucket the key is decided afresh, not by the old denial"
finish
