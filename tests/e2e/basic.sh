#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# End to end through the shipped haproxy.cfg: a tenant's burst passes, the
# next requests get 429 with a Retry-After consistent with the rate and
# well-formed RateLimit / RateLimit-Policy fields; another tenant is not
# affected; a request without the tenant follows missing: deny; the agent's
# health check is UP.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

"$HAPROXY" -c -f "$HAP_CFG" >"$TMP/check.out" 2>&1
ok $? "haproxy -c accepts the shipped config"
! grep -E 'WARNING|ALERT' "$TMP/check.out"
ok $? "haproxy -c prints no warnings"
(cd / && env -u RL_SPOE_CONF "$HAPROXY" -c -q -f "$HAP_CFG") >/dev/null 2>&1
ok $? "haproxy -c from another directory, default SPOE path (default-path config)"

write_policy 5 5/min
start_stack
ok $? "redis, agent and haproxy up; agent UP per the health check"
expect_eq "$(srv_state)" 2 "show servers state: be_spoa_rl/rl1 is UP (srv_op_state 2)"

# ---- the burst -------------------------------------------------------------
codes=""; rs=""; bad_hdr=0
t0=$EPOCHREALTIME	# the burst's start: Retry-After depends on its length
for i in 1 2 3 4 5; do
	c=$(req -H 'X-Tenant: acme' "$URL/")
	codes="$codes $c"
	rl=$(hdr RateLimit); rp=$(hdr RateLimit-Policy)
	[[ $rl =~ $SF_LIST ]] && [[ $rp =~ $SF_LIST ]] || bad_hdr=1
	rs="$rs $(sf_param "$rl" r)"
done
expect_eq "$codes" " 200 200 200 200 200" "the first 5 (burst) requests of tenant acme pass"
expect_eq "$bad_hdr" 0 "allowed responses carry RFC 9651 RateLimit and RateLimit-Policy"
expect_eq "$rs" " 4 3 2 1 0" "remaining (r) counts down 4..0 over the burst"
expect_eq "$(cat "$TMP/b")" "ok" "allowed requests reach the application"

# ---- over the limit --------------------------------------------------------
c=$(req -H 'X-Tenant: acme' "$URL/")
t1=$EPOCHREALTIME
expect_eq "$c" 429 "request 6 of tenant acme: 429"
ra=$(hdr Retry-After); rl=$(hdr RateLimit); rp=$(hdr RateLimit-Policy)
is_posint "$ra"; ok $? "Retry-After is a positive integer ('$ra')"
# GCRA at 5/min, burst 5: the first request's slot frees 12 s after it,
# so request 6 waits 12 s less the time since request 1, rounded up. The
# agent saw less time pass than this shell did (from before request 1 was
# sent to after the 429 came back), never more: the slowest the burst can
# have been gives the lowest value, 12 the highest.
lo=$(since_ceil "$t0" 12)
[ -n "$ra" ] && [ "$ra" -ge "$lo" ] 2>/dev/null && [ "$ra" -le 12 ]
ok $? "Retry-After is 12 s less the burst's $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }') s, rounded up: $lo..12 (got '$ra')"
[[ $rl =~ $SF_LIST ]]; ok $? "RateLimit is an RFC 9651 list ('$rl')"
[[ $rl =~ ^\"tenant\"\; ]]; ok $? "RateLimit names the tenant rule"
expect_eq "$(sf_param "$rl" r)" 0 "RateLimit r=0 on the 429"
t=$(sf_param "$rl" t)
is_posint "$t"; ok $? "RateLimit t is a positive integer ('$t')"
[ -n "$t" ] && [ -n "$ra" ] && [ "$ra" -ge "$t" ] 2>/dev/null
ok $? "Retry-After ($ra) is not earlier than t ($t)"
[[ $rp =~ $SF_LIST ]]; ok $? "RateLimit-Policy is an RFC 9651 list ('$rp')"
expect_eq "$rp" '"tenant";q=5;w=60' "RateLimit-Policy is \"tenant\";q=5;w=60"
grep -q '"error":"rate_limited"' "$TMP/b" && grep -q "\"retry_after\":$ra[},]" "$TMP/b"
ok $? "429 body is the JSON error with the same retry_after ($(cat "$TMP/b"))"
case $(hdr Content-Type) in application/problem+json*) r=0;; *) r=1;; esac
ok $r "429 is application/problem+json (RFC 9457)"

c=$(req -H 'X-Tenant: acme' "$URL/other")
expect_eq "$c" 429 "request 7 of tenant acme (another path): still 429"

# ---- another tenant ---------------------------------------------------------
c=$(req -H 'X-Tenant: globex' "$URL/")
expect_eq "$c" 200 "tenant globex is not affected by acme's limit"
expect_eq "$(sf_param "$(hdr RateLimit)" r)" 4 "globex has its own budget (r=4)"

# ---- no tenant: missing: deny ----------------------------------------------
c=$(req "$URL/")
[ "$c" != 200 ] && [ "$c" != 500 ] && [ "$c" != 000 ]
ok $? "no X-Tenant follows missing: deny (got $c, not 200/500/timeout)"
expect_eq "$c" 429 "no X-Tenant: 429"
c=$(req -H 'X-Tenant;' "$URL/")
[ "$c" != 200 ] && [ "$c" != 500 ] && [ "$c" != 000 ]
ok $? "an empty X-Tenant is missing too (got $c)"

# ---- HAProxy saw no SPOE errors ---------------------------------------------
! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"
grep -q 'rl_status=429 rl_policy=tenant' "$TMP/haproxy.log"
ok $? "haproxy's log line carries the decision (rl_status, rl_policy)"

finish
