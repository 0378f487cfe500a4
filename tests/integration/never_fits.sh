#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A cost that can never fit (ALGORITHMS.md: "denied with no finite retry;
# say so in the log, do not loop"): gcra 1/s burst 5 and cost 6 is denied
# with 429 and Retry-After DECIDE_NEVER_FITS_S (3600), not 1, with the
# rule's t and reset saying the same; the agent logs it at warn once per
# rule per interval (msg=cost_never_fits), not once per request. A cost
# that fits still passes on the same key.
. "$(dirname "$0")/../lib.sh"
RP=$(port 0); AP=$(port 1)
redis_agent_up 1 100ms <<YAML
processing_timeout: 1s
rules:
  - { name: upload, message: rl-request, key: "user:{user}", rate: 1/s, burst: 5, cost: "{c}" }
YAML
"$TOOLS/spop-client" -a "127.0.0.1:$AP" -n 3 rl-request user=s:a c=i:6 >"$TMP/big"
expect_eq "$(field status <"$TMP/big" | sort -u)" 429 "cost 6 over burst 5: 429"
expect_eq "$(field retry_after <"$TMP/big" | sort -u)" 3600 \
	"with Retry-After one hour, not 1"
expect_eq "$(field reset <"$TMP/big" | sort -u)" 3600 "reset says the same"
expect_eq "$(field remaining <"$TMP/big" | sort -u)" 5 "nothing was charged"
grep -q 'ratelimit="upload";r=5;t=3600 ' "$TMP/big"
ok $? "the RateLimit field's t says the same"
n=0
while [ $n -lt 20 ] && ! grep -q 'msg=cost_never_fits' "$TMP/agent.log"; do
	sleep 0.1; n=$((n + 1))
done
grep -q 'level=warn msg=cost_never_fits rule=upload cost=6 quota=5 retry_after=3600 worker=0 suppressed=0' "$TMP/agent.log"
ok $? "logged: level=warn msg=cost_never_fits with rule, cost and quota"
expect_eq "$(grep -c 'msg=cost_never_fits' "$TMP/agent.log")" 1 \
	"once per rule per interval, not once per request"
"$TOOLS/spop-client" -a "127.0.0.1:$AP" rl-request user=s:a c=i:5 >"$TMP/fits"
expect_eq "$(field status <"$TMP/fits")" 0 "cost 5 on the same key fits and passes"
finish
