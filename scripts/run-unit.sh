#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Runs each Criterion binary given; exits 1 if any fails.
rc=0
for t in "$@"; do
	echo "== $t"
	"$t" --jobs 2 || rc=1
done
exit $rc
