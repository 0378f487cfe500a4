#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs every tests/<suite>/*.sh, each bounded in time, and prints one
# summary line "suite: N passed, N failed", and each script's seconds (the
# budget of .ci/run is kept by them). Exits 1 if any script failed.
dir=$1
pass=0; fail=0; failed=""
for t in "$dir"/*.sh; do
	[ -f "$t" ] || continue
	echo "== $t"
	t0=$(date +%s)
	if timeout -k 5 300 bash "$t"; then pass=$((pass + 1))
	else fail=$((fail + 1)); failed="$failed $t"; fi
	echo "-- $t: $(($(date +%s) - t0)) s"
done
echo "$(basename "$dir"): $pass passed, $fail failed"
[ -n "$failed" ] && echo "failed:$failed"
[ "$fail" -eq 0 ]
