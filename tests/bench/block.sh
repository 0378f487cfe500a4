#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The penalty box's hot-path cost (issue 18 item 3), the agent alone with
# spop-bench (no haproxy), one agent of 2 workers against one Redis:
#   plain    10,000 tenants, all allowed (a gcra rule, 1000/s each): the
#            ordinary decision, one script call per batch;
#   blocked  one tenant flooding a rule with block: 1h (it is blocked on
#            its second request): answered from the near-cache until the
#            block's end (NEARCACHE_BLOCK_HOLD_US at most);
#   denied   the same flood on the same limits without block: answered
#            from the near-cache for NEARCACHE_HOLD_US (0.5 s) at a time.
# For each: decisions/s, the agent's CPU per decision (/proc utime+stime),
# Redis script calls and Redis CPU per decision. Writes $BUILD/bench/block.md.
# Called by tests/bench/run.sh (make bench); alone:
#   BUILD=build bash tests/bench/block.sh
# Knobs: BENCH_BLOCK_DURATION (s per run, 5), BENCH_SPOP_CONNS (16),
# BENCH_PIPELINE (20), BENCH_BASE_AGENT (another build's binary, say the
# commit before the penalty box: its plain decisions are measured too,
# alternated with this build's, for the cost of the box on rules without
# one). Loopback only; every wait bounded.
. "$(dirname "$0")/../lib.sh"
set +u

DUR=${BENCH_BLOCK_DURATION:-5}
SPOP_C=${BENCH_SPOP_CONNS:-16}
PIPE=${BENCH_PIPELINE:-20}
HZ=$(getconf CLK_TCK)
OUT="$ROOT/$BUILD/bench"
mkdir -p "$OUT"
RP=$(port 1); AP=$(port 2)

ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
rcpu() {
	redis-cli -p "$RP" info cpu | tr -d '\r' |
		awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f\n", s}'
}
kv() { tr ' ' '\n' <"$1" | sed -n "s/^$2=//p" | tail -n 1; }
# div EXPR EXPR [DECIMALS]: awk arithmetic, "n/a" on a zero divisor
div() {
	awk -v f="${3:-2}" "BEGIN { a = ($1) + 0; b = ($2) + 0;
		if (b == 0) print \"n/a\"; else printf (\"%.\" f \"f\\n\", a / b) }"
}

start_redis "$RP" || exit 1
{
	policy_top "$AP" "redis://127.0.0.1:$RP/0" 90ms 2
	cat <<YAML
rules:
  - { name: plain, message: rl-request, key: "p:{tenant}", rate: 1000/s, burst: 1000 }
  - { name: boxed, message: rl-boxed, key: "b:{tenant}", rate: 1/h, burst: 1, block: 1h }
  - { name: denied, message: rl-denied, key: "d:{tenant}", rate: 1/h, burst: 1 }
YAML
} >"$TMP/block.yaml"
start_agent "$TMP/block.yaml" -q
APID=$AGENT_PID
wait_port "$AP" || exit 1
if [ -n "${BENCH_BASE_AGENT:-}" ]; then	# the plain rule alone, on port 3
	BP=$(port 3)
	sed -n '/^rules:/q;p' "$TMP/block.yaml" | sed "s/:$AP\$/:$BP/" >"$TMP/base.yaml"
	grep -E '^rules:|name: plain' "$TMP/block.yaml" >>"$TMP/base.yaml"
	AGENT=$BENCH_BASE_AGENT start_agent "$TMP/base.yaml" -q
	BPID=$AGENT_PID
	wait_port "$BP" || exit 1
fi

declare -A R
# run NAME SPOP-BENCH-ARGS...: one measured run (against the base agent
# for a NAME starting with base).
run() {
	name=$1; shift
	pid=$APID; p=$AP
	case $name in base*) pid=$BPID; p=$BP ;; esac
	echo "bench: block: $name, ${DUR}s" >&2
	a0=$(ticks "$pid"); r0=$(rcpu); k0=$(script_calls "$RP")
	"$TOOLS/spop-bench" -a "127.0.0.1:$p" -c "$SPOP_C" -P "$PIPE" \
		-d "$DUR" -w 1 "$@" >"$OUT/block-$name.out" 2>&1
	a1=$(ticks "$pid"); r1=$(rcpu); k1=$(script_calls "$RP")
	n=$(kv "$OUT/block-$name.out" acks_total)
	R[$name.dps]=$(kv "$OUT/block-$name.out" decisions_per_s)
	R[$name.denied]=$(kv "$OUT/block-$name.out" denied)
	R[$name.agent]=$(div "$(( (a1 - a0) * 1000000 / HZ ))" "$n")
	R[$name.calls]=$(div "$((k1 - k0))" "$n" 5)
	R[$name.redis]=$(awk -v a="$r0" -v b="$r1" -v n="$n" \
		'BEGIN { if (n + 0 == 0) print "n/a"; else printf "%.3f\n", (b - a) * 1000000 / n }')
	R[$name.n]=$n
}
runs="plain blocked denied"
run plain -k 10000
if [ -n "${BENCH_BASE_AGENT:-}" ]; then
	run base -k 10000
	run plain2 -k 10000
	run base2 -k 10000
	runs="plain base plain2 base2 blocked denied"
fi
run blocked -m rl-boxed -f flood
run denied -m rl-denied -f flood

{
	echo "## The penalty box's hot path (tests/bench/block.sh: spop-bench -c $SPOP_C -P $PIPE, ${DUR} s, agent of 2 workers)"
	echo
	echo "| run | decisions/s | denied | agent CPU µs/decision | script calls/decision | Redis CPU µs/decision |"
	echo "|---|---|---|---|---|---|"
	for k in $runs; do
		echo "| $k | ${R[$k.dps]} | ${R[$k.denied]} | ${R[$k.agent]} | ${R[$k.calls]} | ${R[$k.redis]} |"
	done
	echo
	echo "blocked / plain agent CPU per decision: $(div "${R[blocked.agent]}" "${R[plain.agent]}")"
	[ -n "${BENCH_BASE_AGENT:-}" ] &&
		echo "plain, this build / base ($BENCH_BASE_AGENT), agent CPU per decision: $(div "${R[plain.agent]} + ${R[plain2.agent]}" "${R[base.agent]} + ${R[base2.agent]}"); Redis CPU per decision: $(div "${R[plain.redis]} + ${R[plain2.redis]}" "${R[base.redis]} + ${R[base2.redis]}")"
} >"$OUT/block.md"
cat "$OUT/block.md"
