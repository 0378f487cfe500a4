# SPDX-License-Identifier: Apache-2.0
# The agent on redis+sentinel:// when the address a sentinel gives is a
# replica (a stale sentinel, or one in the middle of a failover): ROLE says
# "slave", so the agent must not take it, but it must rediscover through
# the reconnect backoff, not in a tight loop that hammers the sentinels and
# the replica and floods the log. A. a sentinel monitors a replica from the
# start; B. the master the agent uses is demoted under it (READONLY on the
# next script call). In both, for ~3 s: few connections to the replica
# (INFO stats total_connections_received), one redis_not_master line
# per address per 10 s for the whole process (not one per worker),
# every NOTIFY answered at once with its fail mode; then, once the replica
# is promoted, decisions resume within a couple of seconds.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../e2e/lib-topo.bash"	# master_replica_up, start_sentinel
M=$(port 1); R=$(port 2); S=$(port 3); AP=$(port 4)
MAX_CONNS=50		# the tight loop made ~2700 per second per worker
MAX_LINES=50
RESUME_MS=3000		# the backoff is capped at 1 s
conns() { rc "$R" info stats | tr -d '\r' | sed -n 's/^total_connections_received://p'; }
notmaster() { grep -c 'msg=redis_not_master' "$TMP/agent.log"; }

master_replica_up "$M" "$R"

# One sentinel that monitors the replica as "mymaster"; down-after is far
# beyond the test so that it never tries a failover of its own.
start_sentinel "$S" "$R" mymaster 'sentinel down-after-milliseconds mymaster 60000'
expect_eq "$(rc "$S" sentinel get-master-addr-by-name mymaster | tr '\n' ' ')" \
	"127.0.0.1 $R " "the sentinel gives the replica's address"

cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 2
redis: { url: "redis+sentinel://127.0.0.1:$S/mymaster", timeout: 100ms }
processing_timeout: 1s
rules:
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    rate: 1000/s
    burst: 1000
    fail: open
  - name: login
    message: rl-login
    key: "login:{user}"
    algorithm: gcra
    rate: 1000/s
    burst: 1000
    fail: closed
YAML
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@"; }

# fail_modes PHASE: ~3 s of NOTIFYs, 100 ms apart, each answered within
# 300 ms (the agent's own budget is the 100 ms redis.timeout) by its fail
# mode: fail open = allowed and degraded, fail closed = 503 and degraded.
fail_modes() {
	o=$(c -t 300 -n 15 -g 100 rl-request tenant=s:t$1); r1=$?
	expect_eq "$r1/$(echo "$o" | field status | sort | uniq -c | tr -s ' \n' ' ')/$(echo "$o" | field degraded | sort -u)" \
		"0/ 15 0 /1" "$1: every fail-open NOTIFY is ACKed at once, allowed and degraded"
	o=$(c -t 300 -n 15 -g 100 rl-login user=s:l$1); r1=$?
	expect_eq "$r1/$(echo "$o" | field status | sort | uniq -c | tr -s ' \n' ' ')/$(echo "$o" | field degraded | sort -u)" \
		"0/ 15 503 /1" "$1: every fail-closed NOTIFY is ACKed at once, 503 and degraded"
}

# healthy KEY: a decision by Redis (allowed, not degraded)
healthy() { [ "$(c rl-login user=s:"$1" | field degraded)" = 0 ]; }
# resume: until decisions come from Redis again; sets ELAPSED (ms)
resume() {
	t0=$(now_ms); n=0
	while [ $n -lt 100 ]; do
		n=$((n + 1))
		healthy "r$n" && break
		sleep 0.05
	done
	ELAPSED=$(($(now_ms) - t0))
	[ $n -lt 100 ]
}

# A. a sentinel that points at a replica
c0=$(conns)
agent_up "$TMP/policy.yaml"
fail_modes replica
n=$(($(conns) - c0)); l=$(notmaster)
echo "# A: ${n} connections to the replica and ${l} redis_not_master lines in ~3 s (2 workers)"
[ "$n" -lt $MAX_CONNS ]; ok $? "A: the agent reconnects to the replica at the backoff pace (${n} connections < $MAX_CONNS)"
# both workers' links meet the replica: one line for the process
expect_eq "$l" 1 "A: redis_not_master is logged once for the replica's address, not once per worker"
q=$(rc "$S" info stats | tr -d '\r' | sed -n 's/^total_commands_processed://p')
echo "# A: the sentinel processed ${q} commands"

rc "$R" replicaof no one >/dev/null
resume; ok $? "A: decisions resume once the replica is promoted (${ELAPSED} ms)"
[ "$ELAPSED" -lt $RESUME_MS ]; ok $? "A: within ${RESUME_MS} ms (${ELAPSED} ms)"

# B. the master in use is demoted under the agent: READONLY, then the
# sentinel keeps giving its address. First every worker must be on it:
# one answered above, another may still be waiting out its backoff (<= 1 s).
sleep 1.5
rc "$R" replicaof 127.0.0.1 "$M" >/dev/null
until_ok 200 synced "$R"; ok $? "B: the master in use is demoted to a replica"
c0=$(conns); l0=$(notmaster)
fail_modes demoted
n=$(($(conns) - c0)); l=$(($(notmaster) - l0))
echo "# B: ${n} connections to the demoted master and ${l} redis_not_master lines in ~3 s (2 workers)"
[ "$n" -lt $MAX_CONNS ]; ok $? "B: the agent reconnects at the backoff pace (${n} connections < $MAX_CONNS)"
[ "$l" -lt $MAX_LINES ]; ok $? "B: redis_not_master stays rate-limited (${l} lines < $MAX_LINES)"
grep -q 'READONLY' "$TMP/agent.log"; ok $? "B: the agent saw READONLY"

rc "$R" replicaof no one >/dev/null
resume; ok $? "B: decisions resume once it is promoted again (${ELAPSED} ms)"
[ "$ELAPSED" -lt $RESUME_MS ]; ok $? "B: within ${RESUME_MS} ms (${ELAPSED} ms)"
kill -0 "$AGENT_PID"; ok $? "the agent is still running"
finish
