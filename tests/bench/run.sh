#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make bench: the side-by-side benchmark of issue 6, in one bounded run
# (about 4 minutes with the defaults; every wait is bounded, every
# process started here is stopped by the EXIT trap of tests/lib.sh, every
# socket is on 127.0.0.1).
#
#   BUILD=build sh tests/bench/run.sh
#
# Measures, in this order, on this machine:
#   1. the agent alone: spop-bench (pipelined SPOP connections) against the
#      agent + Redis, one gcra rule over 10,000 tenants: decisions/s, agent
#      CPU per decision (/proc utime+stime), Redis CPU per decision (INFO
#      cpu), next to redis-benchmark doing one EVALSHA of the same script
#      per decision (the naive design); then paced at half saturation and
#      at BENCH_LOW_RATE (20,000/s), with the CPU per decision there too,
#      next to spop-null and to the naive design paced at the same rate
#      (tests/tools/redis-paced: one EVALSHA per decision as it falls due);
#      and tests/bench/batchfmt: the same batches in the script's one
#      format (msgpack), their numbers as decimal strings or as integers.
#   2. memory: agent RSS per 100,000 local-tier keys and per 10,000 SPOP
#      connections; and tests/bench/localbench: the local tier shared by 2,
#      4 and 8 threads against a table per thread (the old per-worker
#      design), on one hot key and on 1M cold keys (about 15 s).
#   3. HTTP through the real haproxy, driven by wrk at fixed connection
#      counts: (a) no limiter, (b) stick-table limiter, (c) agent + Redis
#      ((b) and (c) also at BENCH_CONNS_HI, 200, connections),
#      (d) (c) with one tenant flooding a denied key, (c_local) (c) with
#      the rule in the agent's local tier (SPOE without Redis), the
#      shipped haproxy/haproxy.cfg, and (a)/(c) again at half of (c)'s
#      rate. Then BENCH_PAIRS (3) back-to-back pairs of (b)/(c) and of
#      paced (a)/(c)/spop-null (an agent that does no work: the added p99
#      of HAProxy's SPOE alone), BENCH_PAIR_DURATION (4) s each: the two
#      HTTP targets are judged on the medians of the pairs.
#      CPU per request of haproxy, agent, Redis and wrk for each.
#   4. the penalty box (tests/bench/block.sh): a blocked key's flood, a
#      plain denied key's flood and plain decisions, agent CPU and Redis
#      calls per decision; then Redis Cluster (tests/bench/cluster.sh).
# Prints a table and writes it to $BUILD/bench/results.md (raw outputs next
# to it). Knobs: BENCH_DURATION (s per measured run, 10), BENCH_CONNS (wrk
# connections, 50), BENCH_SPOP_CONNS (16), BENCH_PIPELINE (20),
# BENCH_PROFILE=1 (perf record -g the agent during the agent-alone run,
# report in $BUILD/bench/profile.txt), HAPROXY (the haproxy binary, default
# the one on PATH: HAPROXY=/path/to/haproxy make bench for another version).
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname "$0")/../lib.sh"
set +u			# missing results print empty, not abort

DUR=${BENCH_DURATION:-10}
CONNS=${BENCH_CONNS:-50}
CONNS_HI=${BENCH_CONNS_HI:-200}	# (b) and (c) again, past (c)'s latency bound
WRK_T=${BENCH_WRK_THREADS:-2}
SPOP_C=${BENCH_SPOP_CONNS:-16}
PIPE=${BENCH_PIPELINE:-20}
LOW_RATE=${BENCH_LOW_RATE:-20000}	# agent alone, paced at a moderate rate
BWAIT=${BENCH_BATCH_WAIT:-500us}	# redis.batch_wait of the second agent there
PAIRS=${BENCH_PAIRS:-3}		# back-to-back pairs for the HTTP targets
PDUR=${BENCH_PAIR_DURATION:-4}	# s per run of a pair
TENANTS=10000
MEM_KEYS=100000
MEM_CONNS=10000
HZ=$(getconf CLK_TCK)
BDIR="$ROOT/tests/bench"
OUT="$ROOT/$BUILD/bench"
BENCH="$TOOLS/spop-bench"
mkdir -p "$OUT"
rm -f "$OUT"/*.wrk "$OUT"/*.out

for t in "$HAPROXY" wrk redis-server redis-cli redis-benchmark curl; do
	command -v "$t" >/dev/null || { echo "bench: $t is not installed (make deps)" >&2; exit 1; }
done
for f in "$AGENT" "$BENCH"; do
	[ -x "$f" ] || { echo "bench: $f missing (make BUILD=$BUILD all)" >&2; exit 1; }
done
echo "# bench: $(haproxy_version)"
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null
NOFILE=$(ulimit -n)
if [ "$NOFILE" != unlimited ] && [ "$NOFILE" -lt $((MEM_CONNS + 200)) ]; then
	MEM_CONNS=$((NOFILE - 200))
	echo "bench: ulimit -n is $NOFILE, the connection test opens $MEM_CONNS" >&2
fi

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
RP=$(port 1); AP=$(port 2); MP=$(port 3); HP=$(port 4)
LAP=$(port 5); LMP=$(port 6); SAPP=$(port 7); NP=$(port 8)
WAP=$(port 9); WMP=$(port 10)

say() { echo "bench: $*" >&2; }

# ---- measuring helpers ---------------------------------------------------
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
rcpu() {
	redis-cli -p "$RP" info cpu | tr -d '\r' |
		awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f\n", s}'
}
rcalls() { script_calls "$RP"; }
# kv FILE NAME: the value of NAME= in a spop-bench output line
kv() { tr ' ' '\n' <"$1" | sed -n "s/^$2=//p" | tail -n 1; }
# num EXPR [DECIMALS]: awk arithmetic; "n/a" on a zero divisor
num() {
	awk -v f="${2:-2}" "BEGIN { x = 0; ok = 1; $1; if (!ok) print \"n/a\"; else printf (\"%.\" f \"f\n\", x) }"
}
div() { num "if (($2) + 0 == 0) ok = 0; else x = ($1) / ($2)" "${3:-2}"; }
# wrk_lat FILE PCT: a latency percentile of wrk --latency, in µs
wrk_lat() {
	awk -v p="$2%" '$1 == p {
		v = $2
		if (v ~ /us$/) { sub(/us$/, "", v); print v + 0 }
		else if (v ~ /ms$/) { sub(/ms$/, "", v); print v * 1000 }
		else if (v ~ /m$/) { sub(/m$/, "", v); print v * 60000000 }
		else if (v ~ /s$/) { sub(/s$/, "", v); print v * 1000000 }
	}' "$1"
}
median() {
	printf '%s\n' "$@" | grep -v '^n/a$' | grep -v '^$' | sort -g | awk '{ v[NR] = $1 }
		END { if (NR == 0) print "n/a"; else if (NR % 2) print v[(NR + 1) / 2];
		      else printf "%.2f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}
stop_pid() {
	kill "$1" 2>/dev/null
	for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done
	kill -9 "$1" 2>/dev/null
}

declare -A R		# results: R[name.field]

# ---- processes -----------------------------------------------------------
cat >"$TMP/agent.yaml" <<YAML
# One gcra rule over the tenants. Plan std, 1000/s per tenant: 10,000
# random tenants at any rate reachable here are allowed. Tenant "flood" is
# on plan small (10/s), so a flood from it hits a denied key (path d, the
# near-cache case); tenant "hot" floods a std key (path d_hot: at 1000/s a
# denial lasts 1 ms, so the near-cache can hold it only that long).
# timeout 90ms, just under the SPOE timeout processing (100ms, the
# policy's default processing_timeout), so that a saturated Redis shows up
# as latency, not as fail-open ("degraded") answers that would flatter
# decisions/s.
listen: 127.0.0.1:$AP
workers: 2
max_conns: 20000
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 90ms }
plans:
  std:   { rate: 1000/s, burst: 1000 }
  small: { rate: 10/s, burst: 10 }
tenants: { flood: small }
plan_lookup: { default: std }
rules:
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    plan: rate
    missing: deny
    fail: open
YAML
cat >"$TMP/local.yaml" <<YAML
# memory: the local tier only (no Redis call), room for every key.
listen: 127.0.0.1:$LAP
workers: 2
max_conns: 20000
redis: { url: "redis://127.0.0.1:$RP/0" }
local: { max_keys: 200000 }
rules:
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    rate: 1000/s
    burst: 1000
    store: local
YAML

start_redis "$RP"
RPID=$(eval echo "\$REDIS_PID_$RP")
start_agent "$TMP/agent.yaml" -q -m "127.0.0.1:$MP"
APID=$AGENT_PID
wait_port "$AP" || exit 1
wait_port "$MP" || exit 1
SHA=$(redis-cli -p "$RP" SCRIPT LOAD "$(cat "$ROOT/agent/store/lua/ratelimit.lua")")
# spop-null: an agent that answers every NOTIFY at once and decides
# nothing, the floor for the agent alone paced (below) and for HTTP (the
# pairs)
"$TOOLS/spop-null" "$NP" 900 >"$TMP/spop-null.out" 2>&1 &
NPID=$!
PIDS="$PIDS $NPID"
wait_port "$NP" || exit 1

# ---- 1. the agent alone ----------------------------------------------------
say "agent alone: spop-bench -c $SPOP_C -P $PIPE, ${DUR}s"
redis-cli -p "$RP" flushall >/dev/null
a0=$(ticks "$APID"); r0=$(rcpu); k0=$(rcalls)
perfpid=
if [ "${BENCH_PROFILE:-0}" = 1 ] && command -v perf >/dev/null; then
	( sleep 2; timeout 10 perf record -F 499 --call-graph dwarf,16384 -p "$APID" \
		-o "$OUT/agent.perf" -- sleep 4 >/dev/null 2>&1 ) &
	perfpid=$!
fi
"$BENCH" -a "127.0.0.1:$AP" -c "$SPOP_C" -P "$PIPE" -d "$DUR" -w 1 \
	-k "$TENANTS" >"$OUT/agent-sat.out" 2>&1
a1=$(ticks "$APID"); r1=$(rcpu); k1=$(rcalls)
[ -n "$perfpid" ] && wait "$perfpid"
n=$(kv "$OUT/agent-sat.out" acks_total)
R[as.dps]=$(kv "$OUT/agent-sat.out" decisions_per_s)
R[as.p50]=$(kv "$OUT/agent-sat.out" p50_us)
R[as.p99]=$(kv "$OUT/agent-sat.out" p99_us)
R[as.err]=$(kv "$OUT/agent-sat.out" errors)
R[as.degraded]=$(kv "$OUT/agent-sat.out" degraded)
R[as.self]=$(kv "$OUT/agent-sat.out" self_cpu_us_per_dec)
R[as.agent]=$(div "($a1 - $a0) * 1000000 / $HZ" "$n")
R[as.redis]=$(div "($r1 - $r0) * 1000000" "$n")
R[as.batch]=$(div "$n" "$k1 - $k0" 1)
if [ -f "$OUT/agent.perf" ]; then
	perf report -i "$OUT/agent.perf" --no-children --stdio --no-call-graph \
		--percent-limit 0.7 >"$OUT/profile.txt" 2>/dev/null
	perf report -i "$OUT/agent.perf" --children --stdio --no-call-graph \
		--percent-limit 2 >"$OUT/profile-children.txt" 2>/dev/null
fi

# paced NAME RATE [PORT PID]: spop-bench open loop at RATE decisions/s for
# 5 s against the agent (or the one at PORT, process PID), with its and
# Redis' CPU per decision and the decisions per call: at a moderate rate
# few requests wait per loop turn, so batches are small.
paced() {
	_port=${3:-$AP} _pid=${4:-$APID}
	say "agent alone, paced ($1): spop-bench -R $2, 5s"
	a0=$(ticks "$_pid"); r0=$(rcpu); k0=$(rcalls)
	"$BENCH" -a "127.0.0.1:$_port" -c "$SPOP_C" -P "$PIPE" -d 5 -w 1 -R "$2" \
		-k "$TENANTS" >"$OUT/agent-$1.out" 2>&1
	a1=$(ticks "$_pid"); r1=$(rcpu); k1=$(rcalls)
	n=$(kv "$OUT/agent-$1.out" acks_total)
	R[$1.dps]=$(kv "$OUT/agent-$1.out" decisions_per_s)
	R[$1.p50]=$(kv "$OUT/agent-$1.out" p50_us)
	R[$1.p99]=$(kv "$OUT/agent-$1.out" p99_us)
	R[$1.agent]=$(div "($a1 - $a0) * 1000000 / $HZ" "$n")
	R[$1.redis]=$(div "($r1 - $r0) * 1000000" "$n")
	R[$1.batch]=$(div "$n" "$k1 - $k0" 1)
}
paced ah "$(num "x = int(${R[as.dps]:-0} / 2)" 0)"
# at the moderate rate: the agent, spop-null (the floor: HAProxy-side
# syscalls and wake-ups only), and the agent with a batch wait
# (redis.batch_wait), in alternation, twice; medians
sed "s/^listen: .*/listen: 127.0.0.1:$WAP/; s/timeout: 90ms }/timeout: 90ms, batch_wait: $BWAIT }/" \
	"$TMP/agent.yaml" >"$TMP/agent-wait.yaml"
AGENT_LOG="$TMP/agent-wait.log" start_agent "$TMP/agent-wait.yaml" -q -m "127.0.0.1:$WMP"
WPID=$AGENT_PID
wait_port "$WAP" || exit 1
# naive_paced NAME RATE: the naive design at the same rate, one EVALSHA
# per decision sent as it falls due (tests/tools/redis-paced), so that
# Redis' CPU per decision at this rate is compared with the naive design
# at this rate (issue 20), not with redis-benchmark's saturated pipeline
naive_paced() {
	say "naive design, paced ($1): redis-paced -R $2, 5s"
	r0=$(rcpu); k0=$(rcalls)
	"$TOOLS/redis-paced" -p "$RP" -c "$SPOP_C" -R "$2" -d 5 -k "$TENANTS" -- \
		EVALSHA "$SHA" 1 'rl:{tenant:tenant:t__rand_int__}' "$NAIVE_ARGV" \
		>"$OUT/naive-$1.out" 2>&1
	r1=$(rcpu); k1=$(rcalls)
	R[$1.p99]=$(kv "$OUT/naive-$1.out" p99_us)
	R[$1.err]=$(kv "$OUT/naive-$1.out" errors)
	R[$1.redis]=$(div "($r1 - $r0) * 1000000" "$k1 - $k0")
}
# one GCRA decision in the script's batch format (cost 1, 1000/s, burst
# 1000), as the agent sends it
NAIVE_ARGV=$'\x9b\xa11\xa11\xa10\xa41000\xa71000000\xa10\xa10\xa10\xa10\xa11\xa216'
for i in 1 2; do
	paced "al$i" "$LOW_RATE"
	paced "nl$i" "$LOW_RATE" "$NP" "$NPID"
	paced "wl$i" "$LOW_RATE" "$WAP" "$WPID"
	naive_paced "vl$i" "$LOW_RATE"
done
stop_pid "$WPID"
for f in dps p50 p99 agent redis batch err; do
	for p in al nl wl vl; do
		R[$p.$f]=$(median "${R[${p}1.$f]}" "${R[${p}2.$f]}")
	done
done

NAIVE_N=$(num "x = int(${R[as.dps]:-0} * 3 / 4); if (x < 50000) x = 50000; if (x > 200000) x = 200000" 0)
say "naive design: redis-benchmark, $NAIVE_N x one EVALSHA per decision"
redis-cli -p "$RP" flushall >/dev/null
r0=$(rcpu); k0=$(rcalls)
timeout 60 redis-benchmark -p "$RP" -n "$NAIVE_N" -c "$SPOP_C" -P "$PIPE" -r "$TENANTS" -q \
	EVALSHA "$SHA" 1 'rl:{tenant:tenant:t__rand_int__}' "$NAIVE_ARGV" \
	2>&1 | tr '\r' '\n' | grep -a 'requests per second' | tail -n 1 >"$OUT/naive.out"
r1=$(rcpu); k1=$(rcalls)
R[nv.rps]=$(grep -o '[0-9.]* requests per second' "$OUT/naive.out" | cut -d' ' -f1)
R[nv.calls]=$((k1 - k0))
R[nv.redis]=$(div "($r1 - $r0) * 1000000" "$k1 - $k0")
R[redis.ratio]=$(div "${R[as.redis]}" "${R[nv.redis]}")

# msgpack as the batch format (issue 6): the same batches with their
# numbers as decimal strings and as integers in the one msgpack array,
# side by side on this Redis, at the saturated batch size and at one per
# call. (The naive baseline above sends the strings shape: redis-benchmark
# cannot pass a NUL byte.)
FMT="$ROOT/$BUILD/bench/batchfmt"
BATCH_N=$(num "x = int(${R[as.batch]:-48} + 0.5); if (x < 1) x = 1; if (x > 512) x = 512" 0)
if [ -x "$FMT" ]; then
	say "batch format: strings against integers, $BATCH_N and 1 decisions per call"
	"$FMT" -s "$ROOT/agent/store/lua/ratelimit.lua" -p "$RP" -n "$BATCH_N" -c 2000 \
		-k "$TENANTS" >"$OUT/batchfmt-n.out" 2>&1 ||
		say "batch format: batchfmt failed: $(tail -n 1 "$OUT/batchfmt-n.out")"
	"$FMT" -s "$ROOT/agent/store/lua/ratelimit.lua" -p "$RP" -n 1 -c 20000 \
		-k "$TENANTS" >"$OUT/batchfmt-1.out" 2>&1 ||
		say "batch format: batchfmt failed: $(tail -n 1 "$OUT/batchfmt-1.out")"
	for f in strings msgpack; do
		for b in n 1; do
			l=$(grep "^median $f " "$OUT/batchfmt-$b.out")
			R[fmt.$f.$b.redis]=$(echo "$l" | sed -n 's/.*redis_us_per_decision=\([0-9.]*\).*/\1/p')
			R[fmt.$f.$b.enc]=$(echo "$l" | sed -n 's/.*encode_us_per_decision=\([0-9.]*\).*/\1/p')
		done
	done
fi

# The local tier under contention (issue 17): one table shared by 2 to 8
# threads against a table per thread, CPU ns per decision.
LB="$ROOT/$BUILD/bench/localbench"
if [ -x "$LB" ]; then
	say "local tier: shared table against one per thread, 2/4/8 threads"
	"$LB" -m 300 >"$OUT/localbench.out" 2>&1 ||
		say "local tier: localbench failed: $(tail -n 1 "$OUT/localbench.out")"
fi

# ---- 2. memory -------------------------------------------------------------
say "memory: $MEM_KEYS local-tier keys"
start_agent "$TMP/local.yaml" -q -m "127.0.0.1:$LMP"
LPID=$AGENT_PID
wait_port "$LAP" || exit 1
"$BENCH" -a "127.0.0.1:$LAP" -c 1 -P 1 -d 0.2 -w 0 -k 1 >/dev/null 2>&1
sleep 0.2
m0=$(rss_kb "$LPID")
"$BENCH" -a "127.0.0.1:$LAP" -c "$SPOP_C" -P "$PIPE" -o once -d 60 -w 0 \
	-k "$MEM_KEYS" >"$OUT/mem-keys.out" 2>&1
sleep 0.2
m1=$(rss_kb "$LPID")
keys=$(metric "$LMP" spoa_rl_local_keys)
[ "${keys:-0}" -gt 0 ] || keys=$(kv "$OUT/mem-keys.out" acks_total)	# distinct keys sent
R[mem.keys]=$keys
R[mem.keys_rss0]=$m0
R[mem.per100k]=$(div "($m1 - $m0) * $MEM_KEYS / 1024" "$keys" 1)
R[mem.perkey]=$(div "($m1 - $m0) * 1024" "$keys" 0)

say "memory: $MEM_CONNS SPOP connections"
c0=$(rss_kb "$LPID")
"$BENCH" -a "127.0.0.1:$LAP" -c "$MEM_CONNS" -H 3 -t 30 >"$OUT/mem-conns.out" 2>&1 &
bpid=$!
for _ in $(seq 400); do grep -q '^ready' "$OUT/mem-conns.out" && break; sleep 0.1; done
sleep 0.5
c1=$(rss_kb "$LPID")
conns=$(metric "$LMP" spoa_rl_spop_connections)
wait "$bpid"
R[mem.conns]=$conns
R[mem.conns_ready]=$(sed -n 's/^ready conns=\([0-9]*\).*/\1/p' "$OUT/mem-conns.out")
R[mem.per10k]=$(div "($c1 - $c0) * $MEM_CONNS / 1024" "$conns" 1)
R[mem.perconn]=$(div "($c1 - $c0) * 1024" "$conns" 0)
stop_pid "$LPID"

# ---- 3. HTTP through haproxy ---------------------------------------------
# hap_start CFG [VAR=VALUE...]: haproxy -db on CFG with the bench env.
hap_start() {
	cfg=$1; shift
	env BENCH_BIND="127.0.0.1:$HP" BENCH_AGENT="${HAP_AGENT:-127.0.0.1:$AP}" \
		BENCH_SPOE_CONF="$BDIR/spoe-bench.conf" "$@" \
		"$HAPROXY" -db -f "$cfg" >>"$TMP/haproxy.log" 2>&1 &
	HAPROXY_PID=$!
	PIDS="$PIDS $HAPROXY_PID"
	wait_port "$HP" || { tail -n 20 "$TMP/haproxy.log" >&2; exit 1; }
	sleep 0.3
}
hap_stop() { stop_pid "$HAPROXY_PID"; }

# run_wrk NAME CONNS [VAR=VALUE...]: a 1 s warm-up, then DUR seconds of wrk
# under `time`, with the CPU of haproxy, the agent and Redis read around it.
run_wrk() {
	name=$1 c=$2; shift 2
	env "$@" wrk -t"$WRK_T" -c "$c" -d 1s -s "$BDIR/tenants.lua" \
		"http://127.0.0.1:$HP/" >/dev/null 2>&1
	h0=$(ticks "$HAPROXY_PID"); a0=$(ticks "$APID"); r0=$(rcpu); k0=$(rcalls)
	d0=$(metric "$MP" 'spoa_rl_decisions_total{rule="tenant",outcome="denied"}')
	t0=$(metric "$MP" spoa_rl_decisions_total)
	g0=$(metric "$MP" 'spoa_rl_decisions_total{rule="tenant",outcome="degraded"}')
	q0=$(metric "$MP" spoa_rl_near_cache_hits_total)
	f0=$(metric "$MP" 'spoa_rl_spop_frames_total{type="notify"}')
	s0=$(date +%s.%N)
	TIMEFORMAT='%3U %3S'
	{ time env "$@" wrk -t"$WRK_T" -c "$c" -d "${DUR}s" --latency \
		-s "$BDIR/tenants.lua" "http://127.0.0.1:$HP/" >"$OUT/$name.wrk" 2>&1; } \
		2>"$TMP/$name.time"
	s1=$(date +%s.%N)
	h1=$(ticks "$HAPROXY_PID"); a1=$(ticks "$APID"); r1=$(rcpu); k1=$(rcalls)
	d1=$(metric "$MP" 'spoa_rl_decisions_total{rule="tenant",outcome="denied"}')
	t1=$(metric "$MP" spoa_rl_decisions_total)
	g1=$(metric "$MP" 'spoa_rl_decisions_total{rule="tenant",outcome="degraded"}')
	q1=$(metric "$MP" spoa_rl_near_cache_hits_total)
	f1=$(metric "$MP" 'spoa_rl_spop_frames_total{type="notify"}')
	n=$(awk '/requests in/ {print $1}' "$OUT/$name.wrk")
	n=${n:-0}
	wall=$(num "x = $s1 - $s0" 3)
	wcpu=$(awk '{print $1 + $2}' "$TMP/$name.time")
	R[$name.conns]=$c
	R[$name.n]=$n
	R[$name.rps]=$(awk '/^Requests\/sec:/ {printf "%.0f", $2}' "$OUT/$name.wrk")
	R[$name.p50]=$(wrk_lat "$OUT/$name.wrk" 50)
	R[$name.p99]=$(wrk_lat "$OUT/$name.wrk" 99)
	R[$name.non2xx]=$(awk '/Non-2xx/ {print $NF}' "$OUT/$name.wrk")
	R[$name.non2xx]=${R[$name.non2xx]:-0}
	R[$name.sockerr]=$(awk '/Socket errors/ {gsub(/[^0-9 ]/, ""); s = 0; for (i = 1; i <= NF; i++) s += $i; print s}' "$OUT/$name.wrk")
	R[$name.sockerr]=${R[$name.sockerr]:-0}
	R[$name.hap]=$(div "($h1 - $h0) * 1000000 / $HZ" "$n")
	R[$name.agent]=$(div "($a1 - $a0) * 1000000 / $HZ" "$n")
	R[$name.redis]=$(div "($r1 - $r0) * 1000000" "$n")
	R[$name.wrk]=$(div "$wcpu * 1000000" "$n")
	R[$name.hap_pct]=$(div "($h1 - $h0) * 100 / $HZ" "$wall" 0)
	R[$name.agent_pct]=$(div "($a1 - $a0) * 100 / $HZ" "$wall" 0)
	R[$name.redis_pct]=$(div "($r1 - $r0) * 100" "$wall" 0)
	R[$name.wrk_pct]=$(div "$wcpu * 100" "$wall" 0)
	R[$name.total]=$(num "x = ${R[$name.hap]/n\/a/0} + ${R[$name.agent]/n\/a/0} + ${R[$name.redis]/n\/a/0} + ${R[$name.wrk]/n\/a/0}" 1)
	R[$name.calls]=$((k1 - k0))
	R[$name.denied]=$((d1 - d0))
	R[$name.degraded]=$((g1 - g0))
	R[$name.nc]=$((q1 - q0))
	R[$name.dec_per_req]=$(div "$t1 - $t0" "$n")
	R[$name.notify_per_req]=$(div "$f1 - $f0" "$n")
	R[$name.calls_per_req]=$(div "$k1 - $k0" "$n" 3)
	say "  $name: ${R[$name.rps]} req/s, p99 ${R[$name.p99]} µs, non-2xx ${R[$name.non2xx]}"
}

say "HTTP (a): haproxy, no limiter, wrk -c $CONNS, ${DUR}s"
hap_start "$BDIR/a-nolimit.cfg"
run_wrk a "$CONNS"
hap_stop

say "HTTP (b): haproxy stick-table limiter"
hap_start "$BDIR/b-sticktable.cfg"
run_wrk b "$CONNS"
say "HTTP (b) at $CONNS_HI connections"
run_wrk b_hi "$CONNS_HI"
hap_stop

say "HTTP (c): haproxy + spoa-ratelimit + redis, 10,000 tenants"
redis-cli -p "$RP" flushall >/dev/null
hap_start "$BDIR/c-spoa.cfg"
run_wrk c "$CONNS"
say "HTTP (c) at $CONNS_HI connections"
redis-cli -p "$RP" flushall >/dev/null
run_wrk c_hi "$CONNS_HI"
say "HTTP (d): one tenant flooding a denied key"
run_wrk d "$CONNS" BENCH_TENANT=flood
say "HTTP (d_hot): one tenant flooding a 1000/s key"
run_wrk d_hot "$CONNS" BENCH_TENANT=hot

# Half of (c)'s saturation rate. wrk has no -R (wrk2 is not in Debian), so
# the load is paced: every connection waits DELAY ms after each response
# (wrk's delay() hook), with CONNS_HALF = rate x (DELAY + ~0.5 ms) / 1000
# connections, the same for (a) and (c). The achieved rates are reported.
DELAY=10
# (c)'s saturation: the higher of its two connection counts
SAT=$(num "x = ${R[c.rps]:-0}; if (${R[c_hi.rps]:-0} > x) x = ${R[c_hi.rps]:-0}" 0)
HALF_RATE=$(num "x = int($SAT / 2)" 0)
HALF_C=$(num "x = int($HALF_RATE * ($DELAY + 0.5) / 1000 + 0.5); if (x < $WRK_T) x = $WRK_T" 0)
say "HTTP (c) at half of (c)'s rate: ~$HALF_RATE req/s = $HALF_C connections x 1/${DELAY}ms"
redis-cli -p "$RP" flushall >/dev/null
run_wrk c_half "$HALF_C" BENCH_DELAY_MS="$DELAY"
hap_stop
say "HTTP (a) at the same pacing"
hap_start "$BDIR/a-nolimit.cfg"
run_wrk a_half "$HALF_C" BENCH_DELAY_MS="$DELAY"
hap_stop

# ---- back-to-back pairs for the two HTTP targets ---------------------------
# The machine drifts by 10-30 % between runs minutes apart (BENCHMARKS.md),
# enough to move (c)/(b) across 0.5 from one `make bench` to the next. So
# the two HTTP targets are judged on PAIRS pairs of PDUR-second runs taken
# back to back, the order swapped from one pair to the next: (b) and (c) at
# CONNS connections; (a) and (c) paced as above. The verdict is the median
# over the pairs; every pair is printed. Each pair also paces HAProxy's
# SPOE against spop-null, an agent that answers every NOTIFY at once with
# an empty ACK: the latency that HAProxy 2.6's SPOE hop adds by itself,
# with no agent work and no Redis, the floor under (c)'s added p99. And
# HAProxy + spop-null at CONNS connections, saturated: the most (c) could
# reach with an agent that costs nothing.
pair_run() {	# pair_run NAME CFG CONNS [VAR=VALUE...]
	name=$1 cfg=$2; shift 2
	redis-cli -p "$RP" flushall >/dev/null
	hap_start "$cfg"
	DUR=$PDUR run_wrk "$name" "$@"
	hap_stop
}
for np in $(seq "$PAIRS"); do
	say "pair $np of $PAIRS: (b) and (c) at $CONNS connections, then (a) and (c) paced, ${PDUR}s each"
	if [ $((np % 2)) = 1 ]; then order="b c m a h n"; else order="m c b n h a"; fi
	for p in $order; do
		case $p in
		b) pair_run "pb$np" "$BDIR/b-sticktable.cfg" "$CONNS";;
		c) pair_run "pc$np" "$BDIR/c-spoa.cfg" "$CONNS";;
		m) HAP_AGENT="127.0.0.1:$NP" pair_run "pm$np" "$BDIR/c-spoa.cfg" "$CONNS";;
		a) pair_run "pa$np" "$BDIR/a-nolimit.cfg" "$HALF_C" BENCH_DELAY_MS="$DELAY";;
		h) pair_run "ph$np" "$BDIR/c-spoa.cfg" "$HALF_C" BENCH_DELAY_MS="$DELAY";;
		n) HAP_AGENT="127.0.0.1:$NP" pair_run "pn$np" "$BDIR/c-spoa.cfg" \
			"$HALF_C" BENCH_DELAY_MS="$DELAY";;
		esac
	done
	R[pair$np.cb]=$(div "${R[pc$np.rps]}" "${R[pb$np.rps]}")
	R[pair$np.add]=$(num "x = (${R[ph$np.p99]:-0} - ${R[pa$np.p99]:-0}) / 1000" 2)
	R[pair$np.addnull]=$(num "x = (${R[pn$np.p99]:-0} - ${R[pa$np.p99]:-0}) / 1000" 2)
	R[pair$np.cm]=$(div "${R[pc$np.rps]}" "${R[pm$np.rps]}")
	R[pair$np.overnull]=$(num "x = (${R[ph$np.p99]:-0} - ${R[pn$np.p99]:-0}) / 1000" 2)
done
stop_pid "$NPID"
cbs= adds= addnulls= cms= overnulls=
for np in $(seq "$PAIRS"); do
	cbs="$cbs ${R[pair$np.cb]}" adds="$adds ${R[pair$np.add]}"
	addnulls="$addnulls ${R[pair$np.addnull]}"
	cms="$cms ${R[pair$np.cm]}" overnulls="$overnulls ${R[pair$np.overnull]}"
done
R[pairs.cm]=$(median $cms)
R[pairs.overnull]=$(median $overnulls)
R[pairs.cb]=$(median $cbs)
R[pairs.add]=$(median $adds)
R[pairs.addnull]=$(median $addnulls)

# (c) again, with the agent deciding in its local tier (store: local): the
# cost of SPOE itself, HAProxy and the agent, without the Redis round trip.
say "HTTP (c_local): (c) against an agent with the rule in its local tier"
start_agent "$TMP/local.yaml" -q -m "127.0.0.1:$LMP"
LPID=$AGENT_PID
wait_port "$LAP" || exit 1
hap_start "$BDIR/c-spoa.cfg" BENCH_AGENT="127.0.0.1:$LAP"
main_apid=$APID main_mp=$MP
APID=$LPID MP=$LMP
run_wrk c_local "$CONNS"
APID=$main_apid MP=$main_mp
hap_stop
stop_pid "$LPID"

say "HTTP: the shipped haproxy/haproxy.cfg as is (backend hop, request log, its response-phase groups)"
redis-cli -p "$RP" flushall >/dev/null
hap_start "$ROOT/haproxy/haproxy.cfg" RL_BIND="127.0.0.1:$HP" \
	RL_AGENT="127.0.0.1:$AP" RL_APP="127.0.0.1:$SAPP"
run_wrk shipped "$CONNS"
hap_stop

# ---- the table -------------------------------------------------------------
met() {	# met VALUE OP TARGET
	case $1 in ''|n/a) echo "n/a"; return;; esac
	if awk "BEGIN { exit !($1 $2 $3) }"; then echo "met"; else echo "**not met**"; fi
}
# floor VALUE: whether HAProxy's SPOE alone leaves room under the 1 ms
floor() {
	case $1 in ''|n/a) echo "n/a"; return;; esac
	if awk "BEGIN { exit !($1 > 1) }"; then
		echo "over 1 ms by itself: the target is out of any agent's reach here"
	else
		echo "leaves $(num "x = 1 - $1" 2) ms for the agent and Redis"
	fi
}
ms() { case $1 in ''|n/a) echo n/a;; *) num "x = $1 / 1000" 2;; esac; }

R[ratio.ca]=$(div "${R[c.rps]}" "${R[a.rps]}")
R[ctl.ratio]=$(div "${R[as.agent]}" "${R[as.self]}")
R[low.ratio]=$(div "${R[al.agent]}" "${R[nl.agent]}")
R[loww.ratio]=$(div "${R[wl.agent]}" "${R[nl.agent]}")
R[low.redis]=$(div "${R[al.redis]}" "${R[vl.redis]}")
R[loww.redis]=$(div "${R[wl.redis]}" "${R[vl.redis]}")
R[low.redis_sat]=$(div "${R[al.redis]}" "${R[nv.redis]}")
R[loww.redis_sat]=$(div "${R[wl.redis]}" "${R[nv.redis]}")
R[ratio.cb]=$(div "${R[c.rps]}" "${R[b.rps]}")
R[ratio.lb]=$(div "${R[c_local.rps]}" "${R[b.rps]}")
R[ratio.cb_hi]=$(div "${R[c_hi.rps]}" "${R[b_hi.rps]}")
R[add.p99]=$(num "x = (${R[c.p99]:-0} - ${R[a.p99]:-0}) / 1000" 2)
R[add.p99half]=$(num "x = (${R[c_half.p99]:-0} - ${R[a_half.p99]:-0}) / 1000" 2)
R[d.calls_per_denied]=$(div "${R[d.calls]}" "${R[d.denied]}" 4)
R[d.redis_per_denied]=$(div "${R[d.redis]} * ${R[d.n]}" "${R[d.denied]}" 2)
R[d_hot.calls_per_denied]=$(div "${R[d_hot.calls]}" "${R[d_hot.denied]}" 4)

cpu_model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
{
	echo "# spoa-ratelimit benchmark ($(date -u +%Y-%m-%dT%H:%MZ))"
	echo
	echo "Machine: $(nproc) CPUs, $cpu_model; $(uname -sr); $(haproxy_version), redis $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), agent ${BENCH_REV:-$(cd "$ROOT" && git describe --always --dirty 2>/dev/null)}."
	echo "All processes share the machine's cores; figures are from one run. Load average at the start: $LOAD0, at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
	echo
	echo "## Targets"
	echo
	echo "| target | measured | |"
	echo "|---|---|---|"
	echo "| agent alone: agent CPU per decision <= 2 µs | ${R[as.agent]} µs | $(met "${R[as.agent]}" '<=' 2) |"
	echo "| Redis CPU per decision <= 1/3 of one EVALSHA per request | ${R[as.redis]} / ${R[nv.redis]} µs = ${R[redis.ratio]} | $(met "${R[redis.ratio]}" '<=' 0.3334) |"
	echo "| near-cache flood (d): Redis calls per denied request <= 0.01 | ${R[d.calls]} / ${R[d.denied]} = ${R[d.calls_per_denied]} | $(met "${R[d.calls_per_denied]}" '<=' 0.01) |"
	echo "| HTTP (c) >= 0.5 x (b) req/s, $CONNS connections: median of $PAIRS back-to-back pairs | ${R[pairs.cb]} (pairs:$(echo $cbs | sed 's/ /, /g'); the ${DUR} s runs: ${R[c.rps]} / ${R[b.rps]} = ${R[ratio.cb]}) | $(met "${R[pairs.cb]}" '>=' 0.5) |"
	echo "| the same at $CONNS_HI connections ((c) bound by CPU, not latency) | ${R[c_hi.rps]} / ${R[b_hi.rps]} = ${R[ratio.cb_hi]} | $(met "${R[ratio.cb_hi]}" '>=' 0.5) |"
	echo "| added p99 of (c) over (a) <= 1 ms at half of (c)'s rate: median of $PAIRS back-to-back pairs | ${R[pairs.add]} ms (pairs:$(echo $adds | sed 's/ /, /g'); the ${DUR} s runs: ${R[add.p99half]} ms at ${R[c_half.rps]} / ${R[a_half.rps]} req/s) | $(met "${R[pairs.add]}" '<=' 1) |"
	echo "| (the floor under it, no target) the same for HAProxy's SPOE against spop-null, an agent that does no work: median of the same pairs | ${R[pairs.addnull]} ms (pairs:$(echo $addnulls | sed 's/ /, /g')) | $(floor "${R[pairs.addnull]}") |"
	echo
	echo "## Targets of issue 20 (the agent's own cost against the null agent)"
	echo
	echo "| target | measured | |"
	echo "|---|---|---|"
	echo "| (c) / spop-null req/s at $CONNS connections >= 0.90: median of $PAIRS back-to-back pairs | ${R[pairs.cm]} (pairs:$(echo $cms | sed 's/ /, /g')) | $(met "${R[pairs.cm]}" '>=' 0.90) |"
	echo "| Redis CPU per decision, batched / naive <= 0.15 (saturated) | ${R[as.redis]} / ${R[nv.redis]} µs = ${R[redis.ratio]} | $(met "${R[redis.ratio]}" '<=' 0.15) |"
	echo "| agent CPU per decision / the control (the load generator's own) <= 1.3 (saturated) | ${R[as.agent]} / ${R[as.self]} µs = ${R[ctl.ratio]} | $(met "${R[ctl.ratio]}" '<=' 1.3) |"
	echo "| added p99 of (c) over spop-null, paced at ~half of (c)'s rate, <= 0.5 ms: median of $PAIRS pairs | ${R[pairs.overnull]} ms (pairs:$(echo $overnulls | sed 's/ /, /g')) | $(met "${R[pairs.overnull]}" '<=' 0.5) |"
	echo "| moderate load, $LOW_RATE/s paced: agent CPU per decision / spop-null's <= 1.5 (median of 2) | ${R[al.agent]} / ${R[nl.agent]} µs = ${R[low.ratio]} | $(met "${R[low.ratio]}" '<=' 1.5) |"
	echo "| moderate load: Redis CPU per decision / naive at the same rate (one EVALSHA per decision, redis-paced) <= 0.5 | ${R[al.redis]} / ${R[vl.redis]} µs = ${R[low.redis]} (against the saturated naive, ${R[nv.redis]} µs: ${R[low.redis_sat]}) | $(met "${R[low.redis]}" '<=' 0.5) |"
	echo "| the same two with redis.batch_wait $BWAIT | agent ${R[wl.agent]} µs = ${R[loww.ratio]} x spop-null; Redis ${R[wl.redis]} µs = ${R[loww.redis]} x naive at the rate (${R[loww.redis_sat]} x saturated); ${R[wl.batch]} decisions per call, ACK p99 ${R[wl.p99]} µs (without: ${R[al.batch]}, ${R[al.p99]} µs) | agent $(met "${R[loww.ratio]}" '<=' 1.5), Redis $(met "${R[loww.redis]}" '<=' 0.5) |"
	echo
	echo "## HTTP through haproxy (wrk -t$WRK_T, ${DUR} s, X-Tenant random over $TENANTS tenants)"
	echo
	echo "| path | conns | req/s | p50 ms | p99 ms | non-2xx | sock err | SPOE NOTIFY/req | agent decisions/req | degraded | near-cache hits | script calls/req |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
	for p in a b b_hi c c_hi c_local d d_hot shipped a_half c_half; do
		case $p in
		a) l="(a) no limiter";; b) l="(b) stick table";; c) l="(c) agent + Redis";;
		c_local) l="(c_local) (c), rule in the agent's local tier: no Redis";;
		b_hi) l="(b) at $CONNS_HI connections";; c_hi) l="(c) at $CONNS_HI connections";;
		d) l="(d) flood, one denied tenant (10/s)";; d_hot) l="(d_hot) flood on a 1000/s tenant";; shipped) l="shipped haproxy.cfg";;
		a_half) l="(a) paced";; c_half) l="(c) paced, ~half of (c)";;
		esac
		echo "| $l | ${R[$p.conns]} | ${R[$p.rps]} | $(ms "${R[$p.p50]}") | $(ms "${R[$p.p99]}") | ${R[$p.non2xx]} | ${R[$p.sockerr]} | ${R[$p.notify_per_req]} | ${R[$p.dec_per_req]} | ${R[$p.degraded]} | ${R[$p.nc]} | ${R[$p.calls_per_req]} |"
	done
	echo
	echo "Ratios: (c)/(a) = ${R[ratio.ca]}, (c)/(b) = ${R[ratio.cb]}, (c_local)/(b) = ${R[ratio.lb]}, at $CONNS_HI connections (c)/(b) = ${R[ratio.cb_hi]} (req/s); added p99 of (c) over (a): ${R[add.p99]} ms at $CONNS connections, ${R[add.p99half]} ms paced at ~half of (c)'s rate."
	echo "(d): ${R[d.denied]} requests denied, ${R[d.calls]} script calls (${R[d.calls_per_denied]} per denied request), Redis CPU ${R[d.redis_per_denied]} µs per denied request. (d_hot): ${R[d_hot.denied]} denied, ${R[d_hot.calls_per_denied]} script calls per denied request."
	echo
	echo "### Back-to-back pairs (${PDUR} s per run; the order swaps from one pair to the next)"
	echo
	echo "| pair | (b) req/s | (c) req/s | (c)/(b) | (a) paced: req/s, p99 ms | (c) paced: req/s, p99 ms | added p99 ms | spop-null paced: req/s, p99 ms | its added p99 ms |"
	echo "|---|---|---|---|---|---|---|---|---|"
	for np in $(seq "$PAIRS"); do
		echo "| $np | ${R[pb$np.rps]} | ${R[pc$np.rps]} | ${R[pair$np.cb]} | ${R[pa$np.rps]}, $(ms "${R[pa$np.p99]}") | ${R[ph$np.rps]}, $(ms "${R[ph$np.p99]}") | ${R[pair$np.add]} | ${R[pn$np.rps]}, $(ms "${R[pn$np.p99]}") | ${R[pair$np.addnull]} |"
	done
	echo
	echo "### CPU per request (µs, from /proc utime+stime and Redis INFO cpu) and share of one core"
	echo
	echo "| path | haproxy | agent | redis | wrk | total µs/req | haproxy % | agent % | redis % | wrk % |"
	echo "|---|---|---|---|---|---|---|---|---|---|"
	for p in a b b_hi c c_hi c_local d d_hot shipped a_half c_half; do
		echo "| $p | ${R[$p.hap]} | ${R[$p.agent]} | ${R[$p.redis]} | ${R[$p.wrk]} | ${R[$p.total]} | ${R[$p.hap_pct]} | ${R[$p.agent_pct]} | ${R[$p.redis_pct]} | ${R[$p.wrk_pct]} |"
	done
	echo
	echo "## The agent alone (spop-bench -c $SPOP_C -P $PIPE, ${DUR} s, rl-request over $TENANTS tenants)"
	echo
	echo "| figure | value |"
	echo "|---|---|"
	echo "| decisions/s (saturated) | ${R[as.dps]} |"
	echo "| ACK latency p50 / p99 (saturated, $((SPOP_C * PIPE)) in flight) | $(ms "${R[as.p50]}") / $(ms "${R[as.p99]}") ms |"
	for p in ah al wl nl; do
		case $p in ah) l=half;; al) l=moderate;; wl) l="moderate, batch_wait $BWAIT";; nl) l="moderate, spop-null";; esac
		echo "| paced at ${R[$p.dps]} decisions/s ($l): ACK latency p50 / p99; agent, Redis CPU per decision; decisions per script call | $(ms "${R[$p.p50]}") / $(ms "${R[$p.p99]}") ms; ${R[$p.agent]} µs, ${R[$p.redis]} µs; ${R[$p.batch]} |"
	done
	echo "| agent CPU per decision | ${R[as.agent]} µs |"
	echo "| Redis CPU per decision, agent (batched FCALL) | ${R[as.redis]} µs |"
	echo "| decisions per script call (FCALL) | ${R[as.batch]} |"
	echo "| Redis CPU per decision, naive (redis-benchmark, 1 EVALSHA per decision, -c $SPOP_C -P $PIPE) | ${R[nv.redis]} µs (${R[nv.rps]} EVALSHA/s) |"
	echo "| ratio batched / naive | ${R[redis.ratio]} |"
	echo "| Redis CPU per decision, naive paced at $LOW_RATE/s (redis-paced, 1 EVALSHA per decision as it falls due, $SPOP_C connections; median of 2): reply p99, errors | ${R[vl.redis]} µs; $(ms "${R[vl.p99]}") ms, ${R[vl.err]} |"
	echo "| load generator's own CPU per decision | ${R[as.self]} µs |"
	echo "| batch format, Redis CPU per decision, decimal strings / integers in the msgpack array (median of 3 alternated rounds): $BATCH_N per call; 1 per call | ${R[fmt.strings.n.redis]} / ${R[fmt.msgpack.n.redis]} µs; ${R[fmt.strings.1.redis]} / ${R[fmt.msgpack.1.redis]} µs |"
	echo "| batch format, client CPU per decision to encode, strings / integers (msgpack-c): $BATCH_N per call; 1 per call | ${R[fmt.strings.n.enc]} / ${R[fmt.msgpack.n.enc]} µs; ${R[fmt.strings.1.enc]} / ${R[fmt.msgpack.1.enc]} µs |"
	echo "| errors / degraded (fail-mode) decisions | ${R[as.err]} / ${R[as.degraded]} |"
	echo
	echo "## Memory (agent VmRSS)"
	echo
	echo "| figure | value |"
	echo "|---|---|"
	echo "| per $MEM_KEYS local-tier keys (${R[mem.keys]} keys held) | ${R[mem.per100k]} MiB (${R[mem.perkey]} B/key) |"
	echo "| per $MEM_CONNS SPOP connections (${R[mem.conns]} open after HELLO) | ${R[mem.per10k]} MiB (${R[mem.perconn]} B/conn) |"
	echo
	echo "## Local tier contention (localbench: GCRA, CPU ns per decision)"
	echo
	echo "| workload | threads | shared table | table per thread (old) | shared / per thread | wall ns, shared / per thread |"
	echo "|---|---|---|---|---|---|"
	grep -E '^(hot_key|cold_1m) ' "$OUT/localbench.out" 2>/dev/null |
		sed 's/[a-z_]*=//g' | while read -r wl n _ sc pc r _ sw pw; do
			echo "| $wl | $n | $sc | $pc | $r | $sw / $pw |"
		done
} >"$OUT/results.md"
cat "$OUT/results.md"
echo
say "written to $OUT/results.md (raw outputs in $OUT)"

# The penalty box's hot path (tests/bench/block.sh): a blocked key's flood
# against plain decisions, in ports of this run's range that it leaves
# free; its table goes at the end of results.md.
PORT_BASE=$((PORT_BASE + 16)) BUILD=$BUILD bash "$BDIR/block.sh" &&
	{ echo; cat "$OUT/block.md"; } >>"$OUT/results.md"

# Redis Cluster, 1 and 3 shards (tests/bench/cluster.sh), in ports of this
# run's range that it leaves free; its table goes at the end of results.md.
PORT_BASE=$((PORT_BASE + 16)) BUILD=$BUILD bash "$BDIR/cluster.sh" &&
	{ echo; cat "$OUT/cluster.md"; } >>"$OUT/results.md"
