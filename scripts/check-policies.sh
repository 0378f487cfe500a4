#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Every example policy must pass `spoa-ratelimit -c -f FILE`.
bin=$1; pass=0; fail=0
for f in policies/*.yaml; do
	if "$bin" -c -f "$f" >/dev/null 2>&1; then pass=$((pass + 1))
	else fail=$((fail + 1)); echo "policy check failed: $f"; "$bin" -c -f "$f"; fi
done
echo "policies: $pass passed, $fail failed"
[ $fail -eq 0 ]
