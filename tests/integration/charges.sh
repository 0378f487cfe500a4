#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A denied request is charged nowhere, whatever decides it (ALGORITHMS.md,
# "Several rules"), and a failure is counted by every rule that counts it:
#   1. two store: local rules: the one that denies keeps the other from
#      being charged (each check used to be charged on its own);
#   2. a store: local rule and a Redis rule: a Redis denial leaves the local
#      count untouched (the local check used to be charged before Redis);
#   3. fail: local (Redis down) next to a store: local rule: the same;
#   4. an over-limit failure counted in the local tier (op FORCE) does not
#      stop a Redis rule from counting the same failure (a FORCE never
#      vetoes);
#   5. the local tier's 1d window is the UTC day, as in Redis;
#   6. two agents whose pids are equal (containers run the agent as pid 1)
#      share one sliding log: each request keeps its own member, so the pool
#      admits the limit, not twice it. Needs root for a pid namespace.
# Every window is 1h or more: a window boundary inside a step would reset
# counts the step reads, which 60 s windows did about once in a hundred runs.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); BP=$(port 3); DP=$(port 4)
start_redis "$RP"
policy() { # FILE LISTEN REDIS_PORT
	cat >"$1" <<YAML
listen: $2
workers: 1		# one local tier: every connection sees the same counts
redis: { url: "redis://127.0.0.1:$3/0", timeout: 100ms }
processing_timeout: 1s
rules:
  - name: wide
    message: rl-two
    key: "w:{tenant}"
    algorithm: fixed-window
    limit: 100
    window: 1h
    store: local
  - name: narrow
    message: rl-two
    key: "n:{tenant}"
    algorithm: fixed-window
    limit: 2
    window: 1h
    store: local
  - name: lcap
    message: rl-mixed
    key: "l:{tenant}"
    algorithm: fixed-window
    limit: 5
    window: 1h
    store: local
  - name: rgate
    message: rl-mixed
    key: "g:{tenant}"
    algorithm: gcra
    rate: 5/s
    burst: 2
    fail: local
  - name: ipfail
    message: rl-login
    key: "ipf:{ip}"
    algorithm: fixed-window
    limit: 1
    window: 1h
    count: failures
    store: local
  - name: userfail
    message: rl-login
    key: "uf:{user}"
    algorithm: fixed-window
    limit: 100
    window: 1h
    count: failures
    fail: open
  - name: daily
    message: rl-daily
    key: "d:{tenant}"
    algorithm: fixed-window
    limit: 5
    window: 1d
    store: local
  - name: log
    message: rl-log
    key: "log:{user}"
    algorithm: sliding-log
    limit: 10
    window: 1h
  - name: logid
    message: rl-logid
    key: "logid:{user}"
    algorithm: sliding-log
    limit: 2
    window: 1h
    id: "{id}"
YAML
}
policy "$TMP/policy.yaml" "127.0.0.1:$AP" "$RP"
agent_up "$TMP/policy.yaml"
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@"; }
statuses() { grep '^ack' | field status | tr '\n' ' '; }

# ---- 1. two local rules ------------------------------------------------------
out=$(c -n 6 rl-two tenant=s:acme)
expect_eq "$(echo "$out" | statuses)" "0 0 429 429 429 429 " \
	"two local rules: narrow allows 2, then denies"
# the RateLimit field names every rule; wide's r= is what it was charged
expect_eq "$(echo "$out" | grep '^ack' | sed -n 's/.*"wide";r=\([0-9]*\).*/\1/p' | tr '\n' ' ')" \
	"99 98 98 98 98 98 " \
	"two local rules: the denied requests are not charged to wide (r= stays 98)"

# ---- 2. a local rule and a Redis rule ----------------------------------------
out=$(c -n 5 rl-mixed tenant=s:acme)
expect_eq "$(echo "$out" | statuses)" "0 0 429 429 429 " \
	"local + Redis: the Redis rule's burst of 2 passes, then it denies"
sleep 0.5		# rgate allows again (5/s); lcap has been charged 2, not 5
out=$(c -n 1 rl-mixed tenant=s:acme)
expect_eq "$(echo "$out" | statuses)" "0 " \
	"local + Redis: the requests Redis denied were not charged to the local rule"
expect_eq "$(echo "$out" | grep '^ack' | sed -n 's/.*"lcap";r=\([0-9]*\).*/\1/p')" "2" \
	"local + Redis: lcap counts 3 of 5 (the allowed requests only)"

# ---- 3. fail: local fallback next to a local rule -------------------------
redis-cli -p "$RP" shutdown nosave >/dev/null 2>&1
sleep 0.3
# rgate's fallback share: burst 2 over pool_size 1 x 1 worker = 2
out=$(c -n 4 rl-mixed tenant=s:beta)
expect_eq "$(echo "$out" | statuses)" "0 0 429 429 " \
	"fail: local: the fallback allows its share, then denies"
echo "$out" | grep '^ack' | sed -n 1p | grep -q 'degraded=1'
ok $? "fail: local: the answers are marked degraded"
sleep 0.5
out=$(c -n 1 rl-mixed tenant=s:beta)
expect_eq "$(echo "$out" | grep '^ack' | sed -n 's/.*"lcap";r=\([0-9]*\).*/\1/p')" "2" \
	"fail: local: the fallback's denials were not charged to the local rule"
start_redis "$RP"
back=1
for _ in $(seq 100); do	# a Redis rule decided by Redis again
	c -n 1 rl-mixed tenant=s:probe$_ | grep -q 'degraded=0' && { back=0; break; }
	sleep 0.1
done
ok $back "the agent is back on Redis"

# ---- 4. failures: FORCE never vetoes -----------------------------------------
for i in 1 2 3 4; do
	c -n 1 rl-login-result ip=4:10.0.0.9 user=s:bob status=i:401 >/dev/null
done
expect_eq "$(redis-cli -p "$RP" --raw hgetall 'rl:{userfail:uf:bob}' | sed -n 2p)" "4" \
	"failures: the Redis rule counts all 4, though the local one was over its limit after 1"

# ---- 5. the local tier's windows fall where Redis' do ----------------------
# A 1d window is the UTC day (lim_window.c). The local tier used to count
# time from the machine's boot, so its day ended at boot time + N days.
reset=$(c -n 1 rl-daily tenant=s:acme | grep '^ack' | field reset)
left=$(( 86400 - $(date -u +%s) % 86400 ))
[ -n "$reset" ] && [ $((reset - left)) -ge -2 ] && [ $((reset - left)) -le 2 ]
ok $? "a local 1d window ends at UTC midnight (reset=$reset, want $left)"

# ---- 6a. a sliding log is not fooled by a repeated id ----------------------
# (id: is ignored by sliding-log, with a warning: as the log's member, one
# id sent again and again counted once in Redis and was never limited)
expect_eq "$(c -n 4 rl-logid user=s:bob id=s:same | statuses)" "0 0 429 429 " \
	"sliding-log limit 2: the same id four times is four requests"
expect_eq "$(redis-cli -p "$RP" zcard 'rl:{logid:logid:bob}')" "2" \
	"the log holds 2 members"
grep -q 'msg=policy_warning.*\.id: ignored by sliding-log' "$TMP/agent.log"
ok $? "the policy warns that id: is ignored by sliding-log"

# ---- 6. sliding-log members across agents with the same pid ---------------
if [ "$(id -u)" = 0 ] && unshare --pid --fork --kill-child true 2>/dev/null; then
	policy "$TMP/b.yaml" "127.0.0.1:$BP" "$RP"
	policy "$TMP/d.yaml" "127.0.0.1:$DP" "$RP"
	for f in b d; do
		unshare --pid --fork --kill-child "$AGENT" -f "$TMP/$f.yaml" \
			>>"$TMP/agent-$f.log" 2>&1 &
		PIDS="$PIDS $!"
	done
	wait_port "$BP" && wait_port "$DP"
	allowed=0
	for i in $(seq 10); do
		for p in "$BP" "$DP"; do
			"$CLIENT" -a "127.0.0.1:$p" -n 1 rl-log user=s:alice |
				grep -q '^ack.* status=0' && allowed=$((allowed + 1))
		done
	done
	expect_eq "$allowed" "10" "two agents, both pid 1: one sliding log of 10 admits 10 in all"
	expect_eq "$(redis-cli -p "$RP" zcard 'rl:{log:log:alice}')" "10" \
		"two agents, both pid 1: the log holds 10 distinct members"
else
	echo "# skipped: a pid namespace needs root and unshare"
fi
finish
