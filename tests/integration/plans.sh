# Tenant plans through the agent: a static override, the plan arg, the
# Redis hash (cached, refreshed without reload) and the default.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
start_redis "$RP"
cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms }
processing_timeout: 1s
plans:
  free: { rate: 1/min, burst: 2 }
  pro:  { rate: 1/min, burst: 5 }
tenants: { acme: pro }
plan_lookup: { arg: plan, redis_hash: plans, default: free, cache: 1s }
rules:
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    plan: rate
YAML
start_agent "$TMP/policy.yaml"
wait_port "$AP"
# allowed TENANT [ARGS...]: how many of 8 requests pass
allowed() {
	t=$1; shift
	"$TOOLS/spop-client" -a "127.0.0.1:$AP" -n 8 rl-request tenant=s:"$t" "$@" |
		grep -c ' status=0 '
}
expect_eq "$(allowed acme)" 5 "a static tenants: override gives pro's burst"
expect_eq "$(allowed nobody)" 2 "an unknown tenant gets the default plan"
expect_eq "$(allowed argy plan=s:pro)" 5 "the plan arg selects a plan"
expect_eq "$(allowed argz plan=s:bogus)" 2 "an unknown plan arg falls back to the default"
redis-cli -p "$RP" hset plans hashy pro >/dev/null
"$TOOLS/spop-client" -a "127.0.0.1:$AP" rl-request tenant=s:warm >/dev/null
"$TOOLS/spop-client" -a "127.0.0.1:$AP" rl-request tenant=s:hashy -n 1 >/dev/null
sleep 0.3
expect_eq "$(allowed hashy)" 4 "the Redis hash gives pro (1 used by the warm-up)"
redis-cli -p "$RP" hset plans hashy2 free >/dev/null
"$TOOLS/spop-client" -a "127.0.0.1:$AP" -n 1 rl-request tenant=s:hashy2 >/dev/null
sleep 0.3
redis-cli -p "$RP" hset plans hashy2 pro >/dev/null
expect_eq "$(allowed hashy2)" 1 "within the cache time the old plan holds"
# Past the cache time the next request is still answered from the stale
# entry (free: 2 used, so denied and not charged) while it refreshes; then
# pro's burst of 5 leaves 3.
sleep 1.2
"$TOOLS/spop-client" -a "127.0.0.1:$AP" -n 1 rl-request tenant=s:hashy2 >/dev/null
sleep 0.3
expect_eq "$(allowed hashy2)" 3 "after the cache time the new plan applies, no reload"
finish
