#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The penalty box through the shipped haproxy.cfg (ip=src): a per-IP rule
# of 3 requests per hour with block: 20s:
#   1. 127.0.0.7 passes 3 requests, then the 4th is the offence: 429 with
#      a Retry-After of the block's 20 s;
#   2. it stays 429 while the block lasts, the Retry-After counting down,
#      while 127.0.0.8 still passes;
#   3. `key reset` lifts the block (and the count) within a second.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

{
	policy_head 50ms
	cat <<EOF
rules:
  - name: per-ip
    message: rl-request
    key: "ip:{ip}"
    algorithm: fixed-window
    limit: 3
    window: 1h
    missing: deny
    block: 20s
EOF
} >"$POLICY"
policy_valid "the per-IP policy with block: 20s is valid"
start_stack
ok $? "stack up, agent UP"
from() { req --interface "$1" -H 'X-Tenant: t' "$URL/"; }

codes=""
for _ in 1 2 3; do codes="$codes$(from 127.0.0.7) "; done
expect_eq "$codes" "200 200 200 " "127.0.0.7 passes its 3 requests"
expect_eq "$(from 127.0.0.7)" 429 "the 4th is the offence: 429"
ra1=$(hdr Retry-After)
[ -n "$ra1" ] && [ "$ra1" -ge 19 ] && [ "$ra1" -le 20 ]
ok $? "429 with the block's Retry-After ($ra1), not the hour's window"
sleep 2
expect_eq "$(from 127.0.0.7)" 429 "still blocked 2 s later"
ra2=$(hdr Retry-After)
[ -n "$ra2" ] && [ "$ra2" -lt "$ra1" ] && [ "$ra2" -ge 16 ]
ok $? "Retry-After counts down ($ra1 then $ra2)"
expect_eq "$(from 127.0.0.8)" 200 "another address (127.0.0.8) still passes"

"$AGENT" key reset -f "$POLICY" -r "redis://127.0.0.1:$REDIS_PORT/0" \
	per-ip ip=127.0.0.7 >"$TMP/o" 2>&1
ok $? "key reset per-ip ip=127.0.0.7 ($(cat "$TMP/o"))"
lifted() { [ "$(from 127.0.0.7)" = 200 ]; }
until_ok 20 lifted
ok $? "the block is lifted within 2 s"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE errors in the haproxy log"

finish
