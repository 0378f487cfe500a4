#!/bin/sh
# The exposition text of a filled registry (tests/tools/metrics_dump.c)
# passes `promtool check metrics` from Prometheus. Skipped, saying why,
# when promtool is not installed (Debian package prometheus, ~19 MB
# download, ~96 MB installed; not in `make deps`).
. "$(dirname "$0")/../lib.sh"

"$TOOLS/metrics_dump" >"$TMP/metrics.txt"
ok $? "metrics_dump runs"
grep -q '^spoa_rl_build_info{version="dump"} 1$' "$TMP/metrics.txt"
ok $? "build_info present"
if command -v promtool >/dev/null 2>&1; then
	promtool check metrics <"$TMP/metrics.txt" >"$TMP/promtool.log" 2>&1
	rc=$?
	[ $rc -eq 0 ] || cat "$TMP/promtool.log"
	ok $rc "promtool check metrics"
	# promtool prints lint problems but may still exit 0: none expected.
	expect_eq "$(cat "$TMP/promtool.log")" "" "promtool: no lint findings"
else
	echo "skip - promtool check metrics: promtool is not installed (apt-get install prometheus)"
fi
finish
