#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make bench-cluster (and the end of make bench): does the agent's
# throughput grow with Redis Cluster shards? About a minute, bounded, on
# 127.0.0.1 only; every process started here is stopped by the EXIT trap of
# tests/lib.sh.
#
#   BUILD=build sh tests/bench/cluster.sh
#
# The agent alone (spop-bench, as in section 1 of tests/bench/run.sh: one
# gcra rule over 10,000 tenants, closed loop) against, in turn:
#   single: one standalone master (redis://, what run.sh measures), once;
#   c1:     a Redis Cluster of one master holding all 16,384 slots;
#   c3:     a Redis Cluster of three masters (redis-cli --cluster create);
# c1 and c3 in ROUNDS back-to-back rounds, the order swapped each round.
# For each run: decisions/s, ACK latency, agent CPU per decision (/proc
# utime+stime), Redis CPU per decision (INFO cpu) summed over the nodes and
# per node, script calls per node, decisions per script call; and, once,
# how the tenants' keys spread over the three masters (their slots).
# Then, once each, two rules per request (tenant and ip) against the
# standalone master and against 3 shards.
#
# On a small machine the agent and the load generator saturate the cores
# before Redis does, so decisions/s alone cannot show the shards' effect.
# The Redis-bound capacity can: the decisions/s at which the busiest node
# would use all of its one core, 1 / (that node's CPU per decision of the
# whole run). It is printed for c1 and c3, with their ratio (3 would be
# linear growth), and each run names its bottleneck from each process's
# share of a core and the whole machine's busy time (/proc/stat: other
# work on the machine shows there).
#
# Writes the tables to $BUILD/bench/cluster.md (raw outputs and the
# agent's logs in $BUILD/bench/cluster-*). Knobs: BENCH_CLUSTER_DURATION
# (s per run, 8), BENCH_CLUSTER_ROUNDS (2), BENCH_SPOP_CONNS (16),
# BENCH_PIPELINE (20). About 90 s with the defaults.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname "$0")/../lib.sh"
set +u			# missing results print empty, not abort

DUR=${BENCH_CLUSTER_DURATION:-8}
ROUNDS=${BENCH_CLUSTER_ROUNDS:-2}
SPOP_C=${BENCH_SPOP_CONNS:-16}
PIPE=${BENCH_PIPELINE:-20}
TENANTS=10000
HZ=$(getconf CLK_TCK)
NCPU=$(nproc)
OUT="$ROOT/$BUILD/bench"
BENCH="$TOOLS/spop-bench"
mkdir -p "$OUT"
rm -f "$OUT"/cluster-*.out "$OUT"/cluster-*.log

for t in redis-server redis-cli; do
	command -v "$t" >/dev/null || { echo "bench-cluster: $t is not installed (make deps)" >&2; exit 1; }
done
for f in "$AGENT" "$BENCH"; do
	[ -x "$f" ] || { echo "bench-cluster: $f missing (make BUILD=$BUILD all)" >&2; exit 1; }
done

say() { echo "bench-cluster: $*" >&2; }
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
SP=$(port 1); C1=$(port 2); N1=$(port 3); N2=$(port 4); N3=$(port 5)
AP=$(port 6); MP=$(port 7)

# ---- measuring helpers (as in run.sh) -----------------------------------
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
rcpu() {	# rcpu PORT: seconds of CPU the node has used
	rc "$1" info cpu | tr -d '\r' |
		awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f\n", s}'
}
# busy: the machine's busy and total jiffies (/proc/stat), "busy total"
busy() { awk '/^cpu / { t = 0; for (i = 2; i <= NF; i++) t += $i;
	print t - $5 - $6, t }' /proc/stat; }
kv() { tr ' ' '\n' <"$1" | sed -n "s/^$2=//p" | tail -n 1; }
num() {
	awk -v f="${2:-2}" "BEGIN { x = 0; ok = 1; $1; if (!ok) print \"n/a\"; else printf (\"%.\" f \"f\n\", x) }"
}
div() { num "if (($2) + 0 == 0) ok = 0; else x = ($1) / ($2)" "${3:-2}"; }
ms() { case $1 in ''|n/a) echo n/a;; *) num "x = $1 / 1000" 2;; esac; }

declare -A R		# results: R[setup.field], R[setup.node.field]

# ---- Redis ------------------------------------------------------------------
start_redis "$SP"
# cnode PORT BUS: a cluster-enabled node; its bus port is this run's too
cnode() {
	mkdir -p "$TMP/c$1"
	redis-server --port "$1" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$TMP/c$1" --cluster-enabled yes \
		--cluster-config-file "$TMP/c$1/nodes.conf" \
		--cluster-port "$2" --cluster-node-timeout 2000 \
		--daemonize no >"$TMP/c$1.log" 2>&1 &
	PIDS="$PIDS $!"
}
cnode "$C1" "$(port 11)"
cnode "$N1" "$(port 12)"; cnode "$N2" "$(port 13)"; cnode "$N3" "$(port 14)"
for p in "$C1" "$N1" "$N2" "$N3"; do wait_port "$p" || exit 1; done
rc "$C1" cluster addslotsrange 0 16383 >/dev/null
redis-cli --cluster create "127.0.0.1:$N1" "127.0.0.1:$N2" "127.0.0.1:$N3" \
	--cluster-replicas 0 --cluster-yes >"$TMP/create.log" 2>&1 ||
	{ say "redis-cli --cluster create failed:"; tail -n 5 "$TMP/create.log" >&2; exit 1; }
cluster_ok() {
	for p in "$@"; do
		rc "$p" cluster info | grep -q 'cluster_state:ok' || return 1
	done
}
until_ok 100 cluster_ok "$C1" "$N1" "$N2" "$N3" ||
	{ say "the clusters did not reach cluster_state:ok"; exit 1; }

# How the tenants' keys (rl:{tenant:tenant:tNNNN}) spread over the three
# masters, exactly: each key's slot (CLUSTER KEYSLOT, one pipe), then the
# master serving it (CLUSTER NODES). A tenant's gcra key lives about a
# millisecond past its last request here, so DBSIZE would not tell.
declare -A KEYS_OF
for t in $(seq 0 $((TENANTS - 1))); do
	printf 'CLUSTER KEYSLOT rl:{tenant:tenant:t%04d}\n' "$t"
done | redis-cli -h 127.0.0.1 -p "$N1" >"$TMP/slots"
R[slots]=$(sort -u "$TMP/slots" | wc -l)
rc "$N1" cluster nodes | awk '$3 ~ /master/ { split($2, a, "[:@]")
	for (i = 9; i <= NF; i++) { split($i, r, "-"); if (r[2] == "") r[2] = r[1]
		print a[2], r[1], r[2] } }' >"$TMP/ranges"
while read -r p k; do KEYS_OF[$p]=$k; done < <(awk '
	NR == FNR { port[NR] = $1; lo[NR] = $2; hi[NR] = $3; n = NR; next }
	{ for (i = 1; i <= n; i++) if ($1 >= lo[i] && $1 <= hi[i]) c[port[i]]++ }
	END { for (p in c) print p, c[p] }' "$TMP/ranges" "$TMP/slots")

# ---- one run ----------------------------------------------------------------
# policy NAME URL: run.sh's agent policy against URL
policy() {
	cat >"$TMP/$1.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 2
max_conns: 20000
redis: { url: "$2", timeout: 90ms }
plans:
  std:   { rate: 1000/s, burst: 1000 }
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
	[ "${RULES:-1}" = 2 ] && cat >>"$TMP/$1.yaml" <<YAML
  - name: ip
    message: rl-request
    key: "ip:{ip}"
    algorithm: gcra
    rate: 1000/s
    burst: 1000
    fail: open
YAML
	return 0
}

# healthy: one decision came from Redis, not from the fail mode
healthy() {
	[ "$("$CLIENT" -a "127.0.0.1:$AP" rl-request tenant=s:probe | field degraded)" = 0 ]
}

# run NAME URL NODE-PORT...: the agent on URL, spop-bench for DUR seconds,
# the CPU of the agent and of each node read around it.
run() {
	local name=$1 url=$2 apid a0 a1 b0 b1 t0 t1 s0 s1 f n wall p i r k d
	local sum=0 calls=0 keys=0 worst=0 worst_i=0 maxk=0 maxc=0
	shift 2
	R[$name.nodes]=$#
	R[$name.rules]=${RULES:-1}
	for p in "$@"; do rc "$p" flushall >/dev/null; done
	policy "$name" "$url"
	AGENT_LOG="$OUT/cluster-$name.log" start_agent "$TMP/$name.yaml" \
		-q -m "127.0.0.1:$MP"
	apid=$AGENT_PID
	wait_port "$AP" || exit 1
	until_ok 50 healthy || { say "$name: the agent's decisions are degraded"; exit 1; }
	for p in "$@"; do
		rc "$p" flushall >/dev/null
		rc "$p" config resetstat >/dev/null
		eval "r0_$p=\$(rcpu $p)"
	done
	say "$name: spop-bench -c $SPOP_C -P $PIPE, ${DUR}s against $# node(s)"
	a0=$(ticks "$apid"); read -r b0 t0 < <(busy); s0=$(date +%s.%N)
	"$BENCH" -a "127.0.0.1:$AP" -c "$SPOP_C" -P "$PIPE" -d "$DUR" -w 1 \
		-k "$TENANTS" >"$OUT/cluster-$name.out" 2>&1
	a1=$(ticks "$apid"); read -r b1 t1 < <(busy); s1=$(date +%s.%N)
	f="$OUT/cluster-$name.out"
	n=$(kv "$f" acks_total)
	wall=$(num "x = $s1 - $s0" 3)
	R[$name.dps]=$(kv "$f" decisions_per_s)
	R[$name.p50]=$(kv "$f" p50_us)
	R[$name.p99]=$(kv "$f" p99_us)
	R[$name.err]=$(kv "$f" errors)
	R[$name.degraded]=$(kv "$f" degraded)
	R[$name.lg_pct]=$(div "$(kv "$f" self_cpu_s) * 100" "$(kv "$f" window_s)" 0)
	R[$name.agent]=$(div "($a1 - $a0) * 1000000 / $HZ" "$n")
	R[$name.agent_pct]=$(div "($a1 - $a0) * 100 / $HZ" "$wall" 0)
	R[$name.machine_pct]=$(div "($b1 - $b0) * 100 * $NCPU" "$t1 - $t0" 0)
	stop_pid "$apid"
	i=0
	for p in "$@"; do
		i=$((i + 1))
		eval "r=\$(num \"x = \$(rcpu $p) - \$r0_$p\" 6)"
		k=$(script_calls "$p")
		d=${KEYS_OF[$p]:-$TENANTS}
		R[$name.$i.port]=$p
		R[$name.$i.redis]=$(div "$r * 1000000" "$n")
		R[$name.$i.pct]=$(div "$r * 100" "$wall" 0)
		R[$name.$i.calls]=$k
		R[$name.$i.keys]=$d
		sum=$(num "x = $sum + $r" 6)
		calls=$((calls + k)); keys=$((keys + d))
		[ "$d" -gt "$maxk" ] && maxk=$d
		[ "$k" -gt "$maxc" ] && maxc=$k
		if awk "BEGIN { exit !($r > $worst) }"; then worst=$r worst_i=$i; fi
	done
	R[$name.redis]=$(div "$sum * 1000000" "$n")
	R[$name.calls]=$calls
	R[$name.keys]=$keys
	R[$name.batch]=$(div "$n" "$calls" 1)
	# the busiest node: its CPU per decision of the whole run, and the
	# decisions/s at which it would use its one core
	R[$name.worst]=$worst_i
	R[$name.worst_us]=${R[$name.$worst_i.redis]}
	R[$name.cap]=$(div "$n" "$worst" 0)
	R[$name.n]=$n
	R[$name.worst_s]=$worst
	R[$name.spread]=$(div "$maxk * $#" "$keys")
	R[$name.cspread]=$(div "$maxc * $#" "$calls")
	R[$name.bottleneck]=$(bottleneck "$name")
	say "  $name: ${R[$name.dps]} decisions/s, Redis ${R[$name.redis]} µs/decision, capacity ${R[$name.cap]}/s; ${R[$name.bottleneck]}"
}

stop_pid() {
	kill "$1" 2>/dev/null
	for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done
	kill -9 "$1" 2>/dev/null
}

# bottleneck NAME: which process limited the run. A Redis node is single
# threaded: past 90 % of one core it is the limit. Otherwise, when the
# machine's cores were (nearly) all busy, the shared CPUs were, and the
# shares are named: the agent, the load generator, Redis, and other work
# on the machine (its busy time less ours).
bottleneck() {
	local nm=$1 w=${R[$1.worst]} wp rp ours other shares
	wp=${R[$nm.$w.pct]}
	rp=$(num "x = ${R[$nm.redis]:-0} * ${R[$nm.dps]:-0} / 10000" 0)
	ours=$(num "x = ${R[$nm.agent_pct]:-0} + ${R[$nm.lg_pct]:-0} + $rp" 0)
	other=$(num "x = ${R[$nm.machine_pct]:-0} - $ours; if (x < 0) x = 0" 0)
	shares="agent ${R[$nm.agent_pct]} %, load generator ${R[$nm.lg_pct]} %, Redis $rp %, other work ~$other %"
	if awk "BEGIN { exit !(${wp:-0} >= 90) }"; then
		echo "Redis: node ${R[$nm.$w.port]} at $wp % of its one core ($shares)"
	elif awk "BEGIN { exit !(${R[$nm.machine_pct]:-0} >= 85 * $NCPU) }"; then
		echo "the shared CPUs, ${R[$nm.machine_pct]} % of $((NCPU * 100)) % busy ($shares); not Redis: its busiest node at $wp % of one core"
	else
		echo "none saturated (machine ${R[$nm.machine_pct]} % of $((NCPU * 100)) %; $shares): latency-bound at $((SPOP_C * PIPE)) requests in flight"
	fi
}

# The single master once; then ROUNDS rounds of 1 and 3 shards back to
# back, the order swapped from one round to the next (the machine drifts
# within minutes), judged on the mean of the rounds' ratios.
run single "redis://127.0.0.1:$SP/0" "$SP"
runs=single
for rnd in $(seq "$ROUNDS"); do
	if [ $((rnd % 2)) = 1 ]; then order="1 3"; else order="3 1"; fi
	for s in $order; do
		case $s in
		1) run "c1_$rnd" "redis+cluster://127.0.0.1:$C1" "$C1";;
		3) run "c3_$rnd" "redis+cluster://127.0.0.1:$N1,127.0.0.1:$N2" \
			"$N1" "$N2" "$N3";;
		esac
		runs="$runs c${s}_$rnd"
	done
	R[growth.$rnd]=$(div "${R[c3_$rnd.cap]}" "${R[c1_$rnd.cap]}")
	R[growth_dps.$rnd]=$(div "${R[c3_$rnd.dps]}" "${R[c1_$rnd.dps]}")
done
# pooled over the rounds: all their decisions over all the CPU time of
# each run's busiest node
pooled() {
	local n=0 w=0 rnd
	for rnd in $(seq "$ROUNDS"); do
		n=$((n + ${R[$1_$rnd.n]:-0}))
		w=$(num "x = $w + ${R[$1_$rnd.worst_s]:-0}" 6)
	done
	div "$n" "$w" 0
}
R[c1.cap]=$(pooled c1)
R[c3.cap]=$(pooled c3)
R[growth]=$(div "${R[c3.cap]}" "${R[c1.cap]}")

# Two rules per request (tenant and ip, 10,000 keys each), once against the
# standalone master and once against 3 shards: on a cluster each rule's
# key is in its own slot, so each rule is a script call of its own.
RULES=2 run two_single "redis://127.0.0.1:$SP/0" "$SP"
RULES=2 run two_c3 "redis+cluster://127.0.0.1:$N1,127.0.0.1:$N2" \
	"$N1" "$N2" "$N3"
runs="$runs two_single two_c3"

# ---- the table ----------------------------------------------------------------
{
	echo "## Redis Cluster: the agent alone against 1 and 3 shards ($(date -u +%Y-%m-%dT%H:%MZ))"
	echo
	echo "spop-bench -c $SPOP_C -P $PIPE, ${DUR} s per run, rl-request over $TENANTS tenants: one gcra rule (tenant), or two (tenant and ip: 10,000 keys each); a decision is one NOTIFY answered, whatever its rules. Agent with 2 workers; $NCPU CPUs shared by every process. Load average at the start: $LOAD0, at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
	echo
	echo "| setup | decisions/s | p50 / p99 ms | agent µs/decision | Redis µs/decision, all nodes | per node (µs/decision; % of a core; script calls; tenant keys) | decisions per script call | spread max/mean: tenant keys; calls | Redis-bound capacity/s (busiest node) | errors / degraded |"
	echo "|---|---|---|---|---|---|---|---|---|---|"
	for s in $runs; do
		case $s in
		single) l="standalone master (redis://)";;
		c1_*) l="cluster, 1 master (round ${s#*_})";;
		c3_*) l="cluster, 3 masters (round ${s#*_})";;
		two_single) l="2 rules, standalone master";;
		two_c3) l="2 rules, cluster, 3 masters";;
		esac
		per=""
		for i in $(seq "${R[$s.nodes]}"); do
			per="$per${per:+<br>}${R[$s.$i.redis]}; ${R[$s.$i.pct]} %; ${R[$s.$i.calls]}; ${R[$s.$i.keys]}"
		done
		echo "| $l | ${R[$s.dps]} | $(ms "${R[$s.p50]}") / $(ms "${R[$s.p99]}") | ${R[$s.agent]} | ${R[$s.redis]} | $per | ${R[$s.batch]} | ${R[$s.spread]}; ${R[$s.cspread]} | ${R[$s.cap]} | ${R[$s.err]} / ${R[$s.degraded]} |"
	done
	echo
	for r in $(seq "$ROUNDS"); do
		echo "Round $r: Redis-bound capacity, 3 shards / 1 shard: ${R[c3_$r.cap]} / ${R[c1_$r.cap]} = ${R[growth.$r]}; measured decisions/s, 3 / 1: ${R[growth_dps.$r]}."
	done
	echo
	echo "**Redis-bound capacity, 3 shards / 1 shard: ${R[c3.cap]} / ${R[c1.cap]} = ${R[growth]}** (all rounds pooled: their decisions over the busiest node's CPU seconds; 3 is linear growth). The 10,000 tenants' keys fall in ${R[slots]} distinct slots, on the three masters $(for p in "$N1" "$N2" "$N3"; do printf '%s ' "${KEYS_OF[$p]}"; done | sed 's/ $//; s/ / \/ /g')."
	echo
	echo "| setup | bottleneck (CPU as % of one core) |"
	echo "|---|---|"
	for s in $runs; do
		echo "| $s | ${R[$s.bottleneck]} |"
	done
} >"$OUT/cluster.md"
cat "$OUT/cluster.md"
say "written to $OUT/cluster.md (raw outputs in $OUT/cluster-*.out)"
