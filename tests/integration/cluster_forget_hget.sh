#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Forgetting cluster nodes while a plan lookup is pending on one of them.
# Freeing a link fails what is queued on it at once: the HGET's callback
# wakes the requests waiting on that tenant's plan, which ask whether the
# cluster is up and so walk the node table. That table must be whole by
# then: the first version freed nodes while compacting it, and the walk
# read a node freed a moment before (valgrind: invalid read in cluster_up).
#
# A fake cluster (redis-fake): the map puts the plans hash's slot on a
# node that never answers and every other slot on a port where nothing
# listens; then every slot moves to the seed, and both nodes are forgotten
# at the next refresh, the silent one with its HGET still pending.
. "$(dirname "$0")/../lib.sh"
P1=$(port 1); P2=$(port 2); P3=$(port 3); AP=$(port 4)
S=492		# CLUSTER KEYSLOT plans
MAP="$TMP/map"
printf '0 %d 127.0.0.1 %d\n%d %d 127.0.0.1 %d\n%d 16383 127.0.0.1 %d\n' \
	$((S - 1)) "$P3" "$S" "$S" "$P2" $((S + 1)) "$P3" >"$MAP"
"$TOOLS/redis-fake" "$P1" "$P2" "$MAP" 90 >"$TMP/fake.out" 2>&1 &
PIDS="$PIDS $!"
until_ok 50 grep -q ready "$TMP/fake.out"; ok $? "a fake cluster: seed, silent node, refused port"
cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis+cluster://127.0.0.1:$P1", timeout: 4s }
processing_timeout: 5s
plans:
  free: { rate: 100/s, burst: 100 }
plan_lookup: { redis_hash: plans, default: free, cache: 30s }
rules:
  - { name: r, message: rl-request, key: "k", plan: rate, fail: open }
YAML
VLOG="$TMP/valgrind.log"
case $BUILD in
*asan*)	# valgrind cannot run an ASan binary; ASan finds the read itself
	"$AGENT" -f "$TMP/policy.yaml" >"$TMP/agent.log" 2>&1 & ;;
*)	valgrind --error-exitcode=3 --log-file="$VLOG" "$AGENT" \
		-f "$TMP/policy.yaml" >"$TMP/agent.log" 2>&1 & ;;
esac
AGENT_PID=$!
PIDS="$PIDS $AGENT_PID"
wait_port "$AP" 60
mapped() { grep -q 'msg=cluster_map' "$TMP/agent.log"; }
until_ok 300 mapped; ok $? "the first map applied"
# one tenant: its HGET hangs on the silent node, later requests wait on it
"$TOOLS/spop-client" -a "127.0.0.1:$AP" -t 20000 -n 600 -P 200 -g 40 \
	rl-request tenant=s:t1 >/dev/null 2>&1 &
PIDS="$PIDS $!"
sleep 3
echo "0 16383 127.0.0.1 $P1" >"$MAP"
forgot() { grep -Eq "msg=cluster_node_forgotten host=127.0.0.1 port=$P2( |$)" "$TMP/agent.log"; }
until_ok 300 forgot; ok $? "the silent node, HGET pending, is forgotten"
grep -Eq "msg=cluster_node_forgotten host=127.0.0.1 port=$P3( |$)" "$TMP/agent.log"
ok $? "and the refused one with it"
sleep 1
kill -TERM "$AGENT_PID"
i=0
while kill -0 "$AGENT_PID" 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
wait "$AGENT_PID"
expect_eq "$?" 0 "the agent exits 0, no memory error found"
case $BUILD in
*asan*)	! grep -q 'AddressSanitizer' "$TMP/agent.log"
	ok $? "ASan: no report" ;;
*)	grep -q 'ERROR SUMMARY: 0 errors' "$VLOG"
	ok $? "valgrind: ERROR SUMMARY: 0 errors" ;;
esac
[ "$FAIL" -ne 0 ] && { grep -o "msg=[a-z_]*.*" "$TMP/agent.log" | cut -c1-150 | sort | uniq -c | sort -rn | head -20; } ; [ "$FAIL" -ne 0 ] && grep -A20 'Invalid' "$VLOG" | head -40
finish
