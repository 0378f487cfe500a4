#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# A short, bounded run of each fuzz target (FUZZ_SECONDS each, default 6;
# the SPOP frame decoder, fuzz_spop, gets 10), seeded from
# tests/fuzz/corpus-<name>/ (fuzz_policy: from policies/). Any crash
# fails that target and the run. A smoke run inside `make test`'s time
# budget; `make fuzz` prints the command for long runs.
build=$1; shift
pass=0; fail=0
for f in "$@"; do
	name=$(basename "$f")
	secs=${FUZZ_SECONDS:-6}
	[ "$name" = fuzz_spop ] && [ -z "${FUZZ_SECONDS:-}" ] && secs=10
	corpus="$build/fuzz/corpus-$name"
	mkdir -p "$corpus"
	[ -d "tests/fuzz/corpus-$name" ] && cp tests/fuzz/corpus-"$name"/* "$corpus"/ 2>/dev/null
	# the policy parser starts from the shipped example policies
	[ "$name" = fuzz_policy ] && cp policies/*.yaml "$corpus"/
	echo "== $name for ${secs}s"
	if "$f" -max_total_time="$secs" -rss_limit_mb=1024 -print_final_stats=1 \
		-artifact_prefix="$build/fuzz/" "$corpus" 2>"$build/fuzz/$name.log"; then
		pass=$((pass + 1))
	else
		fail=$((fail + 1)); tail -n 40 "$build/fuzz/$name.log"
	fi
	grep -E 'stat::number_of_executed_units|Done' "$build/fuzz/$name.log" | tail -n 2
done
echo "fuzz: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
