#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The exposition text of a filled registry (tests/tools/metrics_dump.c)
# passes `promtool check metrics` from Prometheus. promtool is required
# (Debian package prometheus, installed by `make deps`): without it this
# test fails.
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
	ok 1 "promtool check metrics: promtool is not installed (apt-get install prometheus; make deps)"
fi
finish
