#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs every tests/<suite>/*.sh, each bounded in time, and prints one
# summary line "suite: N passed, N failed", and each script's seconds (the
# budget of .ci/run is kept by them). Exits 1 if any script failed.
#
# LANES=N runs up to N scripts at once (default 1). Each script's output
# is kept aside and printed whole when it ends, so lanes never interleave
# lines. Only suites whose scripts claim their own ports (tests/lib.sh's
# port_claim) and files may run in lanes; the e2e suites are run in one.
dir=$1
lanes=${LANES:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pass=0; fail=0; failed=""

# run_one SCRIPT N: runs SCRIPT into $out/N.log, its exit code into
# $out/N.rc and its seconds into $out/N.s.
run_one() {
	local t0 rc
	t0=$(date +%s)
	timeout -k 5 300 bash "$1" > "$out/$2.log" 2>&1
	rc=$?
	echo $(($(date +%s) - t0)) > "$out/$2.s"
	echo "$rc" > "$out/$2.rc"
}

# report N SCRIPT: prints a finished script's output and counts it.
report() {
	echo "== $2"
	cat "$out/$1.log"
	if [ "$(cat "$out/$1.rc")" = 0 ]; then pass=$((pass + 1))
	else fail=$((fail + 1)); failed="$failed $2"; fi
	echo "-- $2: $(cat "$out/$1.s") s"
}

scripts=("$dir"/*.sh)
[ -f "${scripts[0]}" ] || scripts=()
declare -A running=()	# N -> script, for the scripts not yet reported
n=0
for t in "${scripts[@]}" ""; do
	# a slot free, or everything started: report what has ended
	while [ "${#running[@]}" -ge "$lanes" ] ||
	    { [ -z "$t" ] && [ "${#running[@]}" -gt 0 ]; }; do
		wait -n
		for k in "${!running[@]}"; do
			[ -f "$out/$k.rc" ] || continue
			report "$k" "${running[$k]}"
			unset "running[$k]"
		done
	done
	[ -n "$t" ] || break
	n=$((n + 1))
	running[$n]=$t
	run_one "$t" "$n" &
done
echo "$(basename "$dir"): $pass passed, $fail failed"
[ -n "$failed" ] && echo "failed:$failed"
[ "$fail" -eq 0 ]
