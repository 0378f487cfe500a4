# SPDX-License-Identifier: Apache-2.0
# The agent on redis+cluster:// when one master stops answering without
# closing its connections (SIGSTOP: a hung host, a long GC-like pause, a
# network black hole). The cluster has no replicas, so nothing fails over
# and the other masters go on serving their slots (the stopped one keeps
# its slots in the map, flagged failing or not).
# Under a steady load over many tenants: the keys of the two healthy
# masters are still decided by Redis, the frozen master's keys follow
# their fail mode (closed: 503) within redis.timeout, every request is
# answered, and after SIGCONT the frozen master's keys are decided by
# Redis again.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../e2e/lib-topo.bash"	# start_cluster, rc, slot_owner...
P1=$(port 1); P2=$(port 2); P3=$(port 3); AP=$(port 4); MP=$(port 5)
BENCH="$TOOLS/spop-bench"
FPID=""
# a stopped node is resumed before the EXIT trap kills everything
trap '[ -n "$FPID" ] && kill -CONT "$FPID" 2>/dev/null; cleanup' EXIT

# (no replicas: nothing fails over, and with cluster-require-full-coverage
# no the other masters serve their slots while one is stopped)
start_cluster "$P1" "$P2" "$P3" "$(port 11)" "$(port 12)" "$(port 13)"
ok $? "a cluster of 3 masters, cluster_state ok on every node"

cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 2
metrics: { listen: 127.0.0.1:$MP }
redis: { url: "redis+cluster://127.0.0.1:$P1,127.0.0.1:$P2", timeout: 100ms }
processing_timeout: 1s
rules:
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    rate: 1000000/s
    burst: 1000000
    fail: closed
  - name: mt
    message: rl-multi
    key: "t:{tenant}"
    algorithm: gcra
    rate: 1000000/s
    burst: 1000000
    fail: closed
  - name: mip
    message: rl-multi
    key: "ip:{ip}"
    algorithm: fixed-window
    limit: 1000000
    window: 1h
    fail: closed
YAML
agent_up "$TMP/policy.yaml" || { ok 1 "the agent listens on $AP"; finish; }
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@"; }
# probe TENANT: "status/degraded" of one request
probe() {
	pout=$(c rl-request tenant=s:"$1" | grep '^ack')
	echo "$(echo "$pout" | field status)/$(echo "$pout" | field degraded)"
}
# mprobe TENANT IP: the same for a request whose two rules are in two slots
mprobe() {
	pout=$(c rl-multi tenant=s:"$1" ip=4:"$2" | grep '^ack')
	echo "$(echo "$pout" | field status)/$(echo "$pout" | field degraded)"
}
healthy() { [ "$(probe probe)" = 0/0 ]; }
until_ok 100 healthy; ok $? "decisions come from the cluster"

# The master to stop is P3; probe tenants by the master serving their key.
port_of() { slot_owner "$(keyslot "$1")"; }
F=$P3
eval "FPID_NODE=\$CPID_$F"
live=""; frozen=""
for t in $(seq 1 60); do
	p=$(port_of "rl:{tenant:tenant:pr$t}")
	if [ "$p" = "$F" ]; then
		[ "$(echo "$frozen" | wc -w)" -lt 3 ] && frozen="$frozen pr$t"
	elif [ -n "$p" ]; then
		[ "$(echo "$live" | wc -w)" -lt 6 ] && live="$live pr$t"
	fi
done
[ "$(echo "$live" | wc -w)" = 6 ] && [ "$(echo "$frozen" | wc -w)" = 3 ]
ok $? "probe tenants on the live masters ($live) and on the one to stop ($frozen)"
# a request spanning slots: its tenant on a live master, its ip on either
mt=""; ip_live=""; ip_frozen=""
for t in $(seq 1 60); do
	p=$(port_of "rl:{mt:t:m$t}")
	[ -n "$p" ] && [ "$p" != "$F" ] && { mt=m$t; break; }
done
for n in $(seq 1 60); do
	p=$(port_of "rl:{mip:ip:10.9.0.$n}")
	[ -z "$ip_frozen" ] && [ "$p" = "$F" ] && ip_frozen=10.9.0.$n
	[ -z "$ip_live" ] && [ -n "$p" ] && [ "$p" != "$F" ] && ip_live=10.9.0.$n
done
[ -n "$mt" ] && [ -n "$ip_live" ] && [ -n "$ip_frozen" ]
ok $? "a two-slot request: tenant $mt live, ip $ip_live live or $ip_frozen to stop"
expect_eq "$(mprobe "$mt" "$ip_live")/$(mprobe "$mt" "$ip_frozen")" 0/0/0/0 \
	"both two-slot requests are decided by Redis before the stop"

# A steady load over 1000 tenants: 2000 requests/s, open loop.
"$BENCH" -a "127.0.0.1:$AP" -c 8 -P 64 -R 2000 -k 1000 -w 1 -d 9 \
	>"$TMP/bench-freeze.out" 2>&1 &
bpid=$!
PIDS="$PIDS $bpid"
sleep 1
FPID=$FPID_NODE
kill -STOP "$FPID"
t_stop=$(date +%s%3N)

# For 8 s: every live probe is decided by Redis; every frozen probe gets
# its fail mode (closed: 503, degraded), each ACK within a second.
bad_live=0; bad_frozen=0; slow=0; rounds=0
while [ $(( $(date +%s%3N) - t_stop )) -lt 8000 ]; do
	for t in $live; do
		r=$(probe "$t"); [ "$r" = 0/0 ] || { bad_live=$((bad_live + 1)); echo "# live $t: $r at +$(( $(date +%s%3N) - t_stop )) ms"; }
	done
	for t in $frozen; do
		t0=$(date +%s%3N)
		r=$(probe "$t")
		[ $(( $(date +%s%3N) - t0 )) -lt 1000 ] || slow=$((slow + 1))
		[ "$r" = 503/1 ] || { bad_frozen=$((bad_frozen + 1)); echo "# frozen $t: $r"; }
	done
	r=$(mprobe "$mt" "$ip_live"); [ "$r" = 0/0 ] || { bad_live=$((bad_live + 1)); echo "# two-slot live: $r"; }
	t0=$(date +%s%3N)
	r=$(mprobe "$mt" "$ip_frozen")
	[ $(( $(date +%s%3N) - t0 )) -lt 1000 ] || slow=$((slow + 1))
	[ "$r" = 503/1 ] || { bad_frozen=$((bad_frozen + 1)); echo "# two-slot frozen: $r"; }
	rounds=$((rounds + 1))
	sleep 0.3
done
expect_eq "$bad_live" 0 "one master stopped: the live masters' keys are still decided by Redis ($rounds rounds)"
expect_eq "$bad_frozen" 0 "the stopped master's keys get their fail mode (closed: 503, degraded), and so does a request with one of its rules there"
expect_eq "$slow" 0 "and are answered within a second"
wait "$bpid"
out=$(cat "$TMP/bench-freeze.out")
echo "# during the stop: $out"
acks=$(echo "$out" | field acks); deg=$(echo "$out" | field degraded)
errs=$(echo "$out" | field errors)
expect_eq "$errs" 0 "every request of the load was answered"
pct=$(( ${deg:-0} * 100 / (${acks:-0} + 1) ))
[ "${acks:-0}" -gt 5000 ] && [ "$pct" -ge 15 ] && [ "$pct" -le 50 ]
ok $? "degraded share of the load is about the stopped master's third ($pct% of $acks)"
grep -q 'msg=redis_link_dropped' "$TMP/agent.log"
ok $? "the stuck node's link was dropped"

# Resumed: its keys are decided by Redis again, and so is the load.
kill -CONT "$FPID"
FPID=""
t_cont=$(date +%s%3N)
back() {
	for t in $frozen $live; do [ "$(probe "$t")" = 0/0 ] || return 1; done
	[ "$(mprobe "$mt" "$ip_frozen")" = 0/0 ]
}
until_ok 50 back
ok $? "after SIGCONT the stopped master's keys are decided by Redis again ($(( $(date +%s%3N) - t_cont )) ms)"
# (each worker has its own links: one may wait out its reconnect backoff,
# at most 2 s, before it tries the node again)
out=$("$BENCH" -a "127.0.0.1:$AP" -c 8 -P 64 -R 2000 -k 1000 -w 3 -d 2 2>&1)
echo "# from 3 s after SIGCONT: $out"
expect_eq "$(echo "$out" | field degraded)/$(echo "$out" | field errors)" 0/0 \
	"the load from 3 s after SIGCONT: none degraded, none lost"
kill -0 "$AGENT_PID"; ok $? "the agent is still running"
finish
