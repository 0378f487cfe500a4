# SPDX-License-Identifier: Apache-2.0
# Near-cache: a flood on one denied key costs Redis about one call per
# retry interval per worker, not one per request.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
redis_agent_up 2 100ms <<YAML
processing_timeout: 1s
rules:
  - { name: tenant, message: rl-request, key: "tenant:{tenant}", rate: 1/min, burst: 1 }
YAML
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
processing_timeout: 1s
rules:
  - { name: algo, message: rl-request, key: "tenant:{tenant}", algorithm: $1, rate: 1/min, burst: 1 }
YAML
}
near_policy gcra
AGENT_LOG="$TMP/agent-near1.log" agent_up "$TMP/near1.yaml"
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
# Redis's state is the truth: after an operator resets a tenant (DEL; a
# Redis restarting empty or a failover losing writes alike), a key the
# near-cache holds as denied until the end of the month passes again
# within the hold (0.5 s), not at the end of the window. While held, the
# Retry-After is still the time left in the window, not the hold.
AP3=$(port 4)
cat >"$TMP/month.yaml" <<YAML
listen: 127.0.0.1:$AP3
workers: 1
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms }
processing_timeout: 1s
rules:
  - { name: monthly, message: rl-request, key: "t:{tenant}", algorithm: fixed-window, limit: 3, window: month }
YAML
AGENT_LOG="$TMP/agent-month.log" agent_up "$TMP/month.yaml"
"$TOOLS/spop-client" -a "127.0.0.1:$AP3" -n 4 rl-request tenant=s:cust >"$TMP/m1"
expect_eq "$(field status <"$TMP/m1" | tr '\n' ' ')" "0 0 0 429 " \
	"limit 3 a month: three pass, the fourth is denied (and learned)"
rc "$RP" del "rl:{monthly:t:cust}" >/dev/null
"$TOOLS/spop-client" -a "127.0.0.1:$AP3" rl-request tenant=s:cust >"$TMP/m2"
ra=$(field retry_after <"$TMP/m2")
[ "$(field status <"$TMP/m2")" = 429 ] && [ "${ra:-0}" -gt 5 ]
ok $? "right after the reset, held: Retry-After is the month's remainder ($ra s), not the hold"
month_passes() {
	"$TOOLS/spop-client" -a "127.0.0.1:$AP3" rl-request tenant=s:cust >"$TMP/m3"
	[ "$(field status <"$TMP/m3")" = 0 ]
}
until_ok 50 month_passes
ok $? "after the reset the key passes again within seconds, not at the end of the month"
finish
