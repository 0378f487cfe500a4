#!/bin/sh
# A short, bounded run of each fuzz target (FUZZ_SECONDS, default 30 in
# total split over the targets), seeded from tests/fuzz/corpus-<name>/.
# Any crash fails the run.
build=$1; shift
n=$#
[ "$n" -eq 0 ] && exit 0
secs=$(( ${FUZZ_SECONDS:-30} / n )); [ "$secs" -lt 5 ] && secs=5
rc=0
for f in "$@"; do
	name=$(basename "$f")
	corpus="$build/fuzz/corpus-$name"
	mkdir -p "$corpus"
	[ -d "tests/fuzz/corpus-$name" ] && cp tests/fuzz/corpus-"$name"/* "$corpus"/ 2>/dev/null
	echo "== $name for ${secs}s"
	"$f" -max_total_time="$secs" -rss_limit_mb=1024 -print_final_stats=1 \
		-artifact_prefix="$build/fuzz/" "$corpus" 2>"$build/fuzz/$name.log" || {
		rc=1; tail -n 40 "$build/fuzz/$name.log"; }
	grep -E 'stat::number_of_executed_units|Done' "$build/fuzz/$name.log" | tail -n 2
done
[ $rc -eq 0 ] && echo "fuzz: 1 passed, 0 failed" || echo "fuzz: 0 passed, 1 failed"
exit $rc
