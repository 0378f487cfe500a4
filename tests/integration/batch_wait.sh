# SPDX-License-Identifier: Apache-2.0
# redis.batch_wait: at a moderate rate, where each loop turn has a request
# or two, a wait of a few milliseconds lets one script call carry several
# turns' requests; every request is still answered, and decided as before.
# Two agents on one Redis, the same rule, one without a wait and one with
# 5 ms; each gets 2,000 decisions/s for 2 s from 4 paced connections.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); AP2=$(port 3)
start_redis "$RP"
policy() {
	policy_top "$1" "redis://127.0.0.1:$RP/0" "$2" 2
	cat <<YAML
processing_timeout: 1s
rules:
  - { name: tenant, message: rl-request, key: "tenant:{tenant}", rate: 1000/s, burst: 1000 }
  - { name: burst, message: rl-burst, key: "b:{tenant}", rate: 10/min, burst: 10 }
YAML
}
policy "$AP" 500ms >"$TMP/nowait.yaml"
policy "$AP2" "500ms, batch_wait: 5ms" >"$TMP/wait.yaml"
AGENT_LOG="$TMP/agent-nowait.log" agent_up "$TMP/nowait.yaml"
AGENT_LOG="$TMP/agent-wait.log" agent_up "$TMP/wait.yaml"

# per_call PORT NAME: decisions per script call x10 for a paced run at
# PORT, into PER_CALL
per_call() {
	k0=$(script_calls "$RP")
	"$TOOLS/spop-bench" -a "127.0.0.1:$1" -c 4 -P 4 -d 2 -w 0 -R 2000 \
		-k 1000 >"$TMP/$2.out" 2>&1
	k1=$(script_calls "$RP")
	n=$(tr ' ' '\n' <"$TMP/$2.out" | sed -n 's/^acks_total=//p')
	e=$(tr ' ' '\n' <"$TMP/$2.out" | sed -n 's/^errors=//p')
	d=$(tr ' ' '\n' <"$TMP/$2.out" | sed -n 's/^degraded=//p')
	echo "# $2: $n decisions, $((k1 - k0)) script calls, errors=$e degraded=$d"
	expect_eq "${e:-x}/${d:-x}" 0/0 "$2: no request failed or was decided without Redis"
	[ "${n:-0}" -ge 3600 ]; ok $? "$2: the paced requests were answered ($n of 4000)"
	PER_CALL=$(awk -v n="${n:-0}" -v k=$((k1 - k0)) \
		'BEGIN { printf "%d\n", k ? 10 * n / k : 0 }')
}
per_call "$AP" nowait; nowait=$PER_CALL
per_call "$AP2" wait; wait5=$PER_CALL
echo "# decisions per call x10: no wait $nowait, 5 ms wait $wait5"
[ "$wait5" -ge 30 ]; ok $? "with a 5 ms wait a call carries 3 or more decisions ($wait5 / 10)"
[ "$wait5" -ge $((2 * nowait)) ]; ok $? "and at least twice as many as without ($wait5 against $nowait, x10)"

# The wait changes when a decision is sent, not what it is: a burst of
# 40 on one key of burst 10 (10/min) through the waiting agent admits
# exactly 10.
"$TOOLS/spop-client" -a "127.0.0.1:$AP2" -n 40 -P 8 rl-burst tenant=s:one >"$TMP/one.out"
expect_eq "$(grep -c ' status=0 ' "$TMP/one.out")" 10 "the waiting agent admits exactly the burst"
expect_eq "$(grep -c ' status=429 ' "$TMP/one.out")" 30 "and denies the rest"

# The policy says what a wait may be.
printf 'listen: 127.0.0.1:%s\nredis: { url: "redis://127.0.0.1:%s/0", batch_wait: 20ms }\nrules: []\n' "$AP" "$RP" >"$TMP/bad.yaml"
out=$("$AGENT" -c -f "$TMP/bad.yaml" 2>&1); rc=$?
[ $rc -ne 0 ]; ok $? "batch_wait past 10ms is refused (rc $rc)"
echo "$out" | grep -q 'batch_wait.*must be between 0us and 10000us'; ok $? "with an error that names it: $(echo "$out" | head -n 1)"
finish
