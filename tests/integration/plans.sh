# SPDX-License-Identifier: Apache-2.0
# Tenant plans through the agent: a static override, the plan arg, the
# Redis hash (cached, refreshed without reload) and the default.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
redis_agent_up 1 100ms <<YAML
processing_timeout: 1s
overrides: false   # its poll is HGETs too: the counts below are the plans'
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
  - name: ip
    message: rl-request
    key: "ip:{ip}"
    rate: 1/min
    burst: 1
    missing: skip
YAML
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

# ---- the first requests of a tenant wait for its plan ---------------------
# Regression: the plan cache never waited. A tenant whose plan is in the
# Redis hash got the default plan's limits until its HGET answered: after
# every start, for every tenant once the full table had been emptied, while
# Redis was down, and always for tenants longer than 127 bytes. Now the
# request is held for that one round trip (within redis.timeout).
c1() { "$TOOLS/spop-client" -a "127.0.0.1:$AP" "$@"; }
redis-cli -p "$RP" hset plans first1 pro first2 pro >/dev/null
expect_eq "$(c1 rl-request tenant=s:first1 | field limit)" 5 \
	"the first request of a tenant in the hash gets its plan (pro's burst)"
expect_eq "$(c1 -n 8 -P 8 rl-request tenant=s:first2 | grep -c ' status=0 ')" 5 \
	"a pipelined burst of a new tenant waits for one HGET: pro's 5 pass"
long=$(printf 'L%.0s' $(seq 300))
redis-cli -p "$RP" hset plans "$long" pro >/dev/null
expect_eq "$(c1 rl-request tenant=s:"$long" | field limit)" 5 \
	"a 300-byte tenant is looked up in the hash too"
expect_eq "$(allowed "$long")" 4 "and its plan is cached (1 used already)"
hgets() {
	redis-cli -p "$RP" info commandstats |
		sed -n 's/^cmdstat_hget:calls=\([0-9]*\),.*/\1/p'
}
before=$(hgets)
c1 -n 6 rl-request tenant=s:stranger >/dev/null
expect_eq "$(( $(hgets) - ${before:-0} ))" 1 \
	"a tenant not in the hash costs one HGET; its absence is cached"
# A restart empties the cache: the first request still gets pro.
kill "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null
agent_up "$TMP/policy.yaml"
until_ok 30 test "$(grep -c msg=redis_connected "$TMP/agent.log")" -ge 2
expect_eq "$(c1 rl-request tenant=s:first1 | field limit)" 5 \
	"after a restart, the first request of a pro tenant is judged as pro"
# A full table evicts one entry at a time. It used to empty itself, so a
# flood of new tenant values (more than the 65536 a worker holds) put every
# tenant back on the default plan until its HGET answered.
c1 -u -n 70000 -P 32 -t 10000 rl-request tenant=s:flood >/dev/null
ok $? "a flood of 70000 new tenants is answered"
expect_eq "$(c1 rl-request tenant=s:first1 | field limit)" 5 \
	"after the flood, a pro tenant is still judged as pro"
# Redis stalled (1.5 s): the lookup's wait is bounded by redis.timeout
# (100ms), then the rule's fail mode (open) answers, degraded.
redis-cli -p "$RP" hset plans stalled pro >/dev/null
redis-cli -p "$RP" client pause 1500 all >/dev/null
t0=$(now_ms)
out=$(c1 rl-request tenant=s:stalled)
t1=$(now_ms)
expect_eq "$(echo "$out" | field status) $(echo "$out" | field degraded)" "0 1" \
	"Redis stalled: the plan lookup gives up, fail: open applies, degraded"
[ $((t1 - t0)) -lt 1000 ]
ok $? "and the ACK came within the budget ($((t1 - t0)) ms)"
sleep 1.5
expect_eq "$(c1 rl-request tenant=s:stalled | field limit)" 5 \
	"once Redis answers again the tenant gets its plan"
# A lookup Redis refuses (the hash is not a hash) is not the default plan
# either: the rule's fail mode answers, and the agent says why.
redis-cli -p "$RP" del plans >/dev/null
redis-cli -p "$RP" set plans oops >/dev/null
out=$(c1 rl-request tenant=s:wrongtype)
expect_eq "$(echo "$out" | field status) $(echo "$out" | field degraded)" "0 1" \
	"a failed lookup: fail: open applies, degraded"
until_ok 20 grep -q 'msg=plan_lookup_failed' "$TMP/agent.log"
ok $? "plan_lookup_failed is logged"
# ... and is not asked again on every request: 20 more requests of that
# tenant cost at most one HGET (one if the 1 s retry time ran out among
# them), where each used to send its own.
hgets() {
	redis-cli -p "$RP" info commandstats | tr -d '\r' |
		awk -F'[=,:]' '/^cmdstat_hget:/ { print $3 }'
}
h0=$(hgets)
out=$(c1 -n 20 rl-request tenant=s:wrongtype | field degraded | sort -u)
h1=$(hgets)
expect_eq "$out" 1 "the 20 requests get the fail mode, degraded"
[ $((h1 - h0)) -le 1 ]
ok $? "a failed lookup is not retried per request ($((h1 - h0)) HGETs for 20)"
sleep 1.1
c1 rl-request tenant=s:wrongtype >/dev/null
expect_eq "$(($(hgets) - h1))" 1 "past the retry time, the tenant is asked for again"
# A failed lookup fails the rules that need the plan, not the others: the
# ip rule is still decided by Redis (it failed open with the plan before).
out=$(c1 -n 2 rl-request tenant=s:wrongtype ip=4:10.1.2.3)
expect_eq "$(echo "$out" | field status | tr '\n' ' ')" "0 429 " \
	"a failed lookup leaves the rules without a plan to Redis"
expect_eq "$(echo "$out" | field policy | tail -1)" ip "the 429 is the ip rule's"
expect_eq "$(redis-cli -p "$RP" exists 'rl:{ip:ip:10.1.2.3}')" 1 \
	"and Redis holds the ip key"
finish
