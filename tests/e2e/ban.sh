#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Banning an abuser through the shipped haproxy.cfg (ip=src) with a runtime
# override (`spoa-ratelimit override set ... --deny --ttl`), no reload:
#   1. 127.0.0.5 passes under the per-IP rule (limit 100 per hour);
#   2. once banned for 30 s it gets 429 with a Retry-After near 30 that
#      counts down, while 127.0.0.6 still passes;
#   3. `override del` lifts the ban within a second.
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
    limit: 100
    window: 1h
    missing: deny
EOF
} >"$POLICY"
policy_valid "the per-IP policy is valid"
start_stack
ok $? "stack up, agent UP"
ov() { "$AGENT" override "$@" -f "$POLICY" -r "redis://127.0.0.1:$REDIS_PORT/0"; }
from() { req --interface "$1" -H 'X-Tenant: t' "$URL/"; }

expect_eq "$(from 127.0.0.5)" 200 "127.0.0.5 passes before the ban"
ov set per-ip ip=127.0.0.5 --deny --ttl 30s >"$TMP/o" 2>&1
ok $? "override set per-ip ip=127.0.0.5 --deny --ttl 30s ($(cat "$TMP/o"))"
banned() { [ "$(from 127.0.0.5)" = 429 ]; }
until_ok 20 banned
ok $? "the ban applies within 2 s, no reload"
ra1=$(hdr Retry-After)
[ -n "$ra1" ] && [ "$ra1" -ge 26 ] && [ "$ra1" -le 30 ]
ok $? "429 with Retry-After near the 30 s left ($ra1)"
sleep 2
expect_eq "$(from 127.0.0.5)" 429 "still banned 2 s later"
ra2=$(hdr Retry-After)
[ -n "$ra2" ] && [ "$ra2" -lt "$ra1" ]
ok $? "Retry-After counts down ($ra1 then $ra2)"
expect_eq "$(from 127.0.0.6)" 200 "another address (127.0.0.6) still passes"

ov del per-ip ip=127.0.0.5 >/dev/null 2>&1
ok $? "override del per-ip ip=127.0.0.5"
lifted() { [ "$(from 127.0.0.5)" = 200 ]; }
until_ok 20 lifted
ok $? "the ban is lifted within 2 s"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE errors in the haproxy log"

finish
