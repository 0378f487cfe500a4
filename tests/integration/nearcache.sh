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
calls() {
	redis-cli -p "$RP" info commandstats |
		awk -F'[=,:]' '/^cmdstat_eval(sha)?:/ { n += $3 } END { print n + 0 }'
}
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
finish
