#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A per-route limit ("{route}" in the key) through the shipped
# haproxy.cfg. txn.rl_route was the raw path, so //v1/x, /V1/%78 or
# /v1/x;a=b, which an application may route to /v1/x, each had a bucket
# of their own: a client got the limit again per spelling.
#   - every spelling shares /v1/x's bucket (2/min: 2 pass, then 429);
#   - another route keeps its own bucket.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

{
	policy_head 50ms
	cat <<EOF
rules:
  - name: route
    message: rl-request
    key: "r:{route}"
    rate: 2/min
    burst: 2
EOF
} >"$POLICY"
policy_valid "the policy is valid"
start_stack
ok $? "stack up, agent UP"

codes=""
for p in /v1/x //v1//x /V1/%78 '/v1;a=b/x;c=d'; do
	codes="$codes $(req --path-as-is "$URL$p")"
done
expect_eq "$codes" " 200 200 429 429" "/v1/x, //v1//x, /V1/%78, /v1;a=b/x;c=d: one bucket, 2 then 429"
expect_eq "$(req "$URL/v1/y")" 200 "/v1/y has its own bucket"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"

finish
