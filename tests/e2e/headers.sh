#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Several rules on rl-request: a per-IP flood guard ("ip", 3/min burst 3),
# the tenant rule ("tenant", 10/min burst 10) and an API-key rule with
# headers: false ("hidden", 1/min burst 1). Through the shipped haproxy.cfg:
#  - RateLimit and RateLimit-Policy list exactly "ip" and "tenant", in rule
#    order, in RFC 9651 syntax, on allowed and on 429 responses (whichever
#    rule denied, the hidden one included);
#  - Retry-After is not earlier than the deciding rule's t;
#  - a request denied by one rule is charged to none of the others (the
#    tenant's TAT in Redis does not move, and the next decision's remaining
#    shows it; the same for the ip rule when the tenant rule denies);
#  - the global "headers:" mode, changed by SIGHUP: legacy gives
#    X-RateLimit-Limit/Remaining/Reset of the deciding rule and no IETF
#    fields, both gives both, none gives neither.
# Client addresses vary with curl --interface 127.0.0.N (the ip arg is src).
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

{
	policy_head 50ms
	cat <<EOF
rules:
  - name: ip
    message: rl-request
    key: "ip:{ip}"
    algorithm: gcra
    rate: 3/min
    burst: 3
    missing: skip
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    rate: 10/min
    burst: 10
    missing: deny
  - name: hidden
    message: rl-request
    key: "k:{key}"
    algorithm: gcra
    rate: 1/min
    burst: 1
    missing: skip
    headers: false
EOF
} >"$POLICY"
start_stack
ok $? "stack up, agent UP"

RL_RE='^"ip";r=[0-9]+;t=[0-9]+, "tenant";r=[0-9]+;t=[0-9]+$'
RP_RE='^"ip";q=3;w=60, "tenant";q=10;w=60$'

# from N ARGS...: a request from 127.0.0.N.
from() { n=$1; shift; req --interface "127.0.0.$n" "$@"; }
# member NAME: the RateLimit member of rule NAME in the last response.
member() { hdr RateLimit | tr ',' '\n' | sed 's/^ *//' | grep "^\"$1\";"; }
tat() { redis-cli -p "$REDIS_PORT" GET "rl:{tenant:tenant:$1}"; }
policy_of_body() { sed -n 's/.*"policy":"\([^"]*\)".*/\1/p' "$TMP/b"; }

# ---- allowed ---------------------------------------------------------------
c=$(from 2 -H 'X-Tenant: t1' "$URL/")
expect_eq "$c" 200 "a first request passes"
rl=$(hdr RateLimit); rp=$(hdr RateLimit-Policy)
[[ $rl =~ $SF_LIST ]] && [[ $rp =~ $SF_LIST ]]
ok $? "RateLimit and RateLimit-Policy are RFC 9651 lists"
[[ $rl =~ $RL_RE ]]; ok $? "allowed: RateLimit lists exactly ip, tenant ('$rl')"
[[ $rp =~ $RP_RE ]]; ok $? "allowed: RateLimit-Policy lists exactly ip, tenant ('$rp')"
expect_eq "$(member ip)" '"ip";r=2;t=20' "ip member: r=2, t=20 (3/min)"
expect_eq "$(member tenant)" '"tenant";r=9;t=6' "tenant member: r=9, t=6 (10/min)"
! grep -qi hidden "$TMP/h"; ok $? "the headers: false rule is in no header"

# ---- denied by the hidden rule ---------------------------------------------
t3=$EPOCHREALTIME	# ip's t counts down from .3's first request
c1=$(from 3 -H 'X-Tenant: t1' -H 'X-Api-Key: k1' "$URL/")
[[ $(hdr RateLimit) =~ $RL_RE ]]; h1=$?
c2=$(from 3 -H 'X-Tenant: t1' -H 'X-Api-Key: k1' "$URL/")
rl=$(hdr RateLimit); rp=$(hdr RateLimit-Policy); ra=$(hdr Retry-After)
expect_eq "$c1 $c2" "200 429" "the hidden rule (burst 1) denies the 2nd request of API key k1"
expect_eq "$h1" 0 "allowed with the hidden rule matched: still only ip, tenant"
expect_eq "$(policy_of_body)" hidden "that 429 was decided by the hidden rule"
[[ $rl =~ $RL_RE ]]; ok $? "429 by the hidden rule: RateLimit lists exactly ip, tenant ('$rl')"
[[ $rp =~ $RP_RE ]]; ok $? "429 by the hidden rule: RateLimit-Policy lists exactly ip, tenant ('$rp')"
is_posint "$ra" && [ "$ra" -ge 55 ] && [ "$ra" -le 60 ]
ok $? "its Retry-After is the hidden rule's (1/min: 55..60, got '$ra')"
c=$(from 3 -H 'X-Tenant: t1' "$URL/")
# ip's next unit is 20 s after .3's first request: t is 20 less the time
# since then, rounded up (20 when quick; 19 once a loaded host took >1 s)
lo=$(since_ceil "$t3" 20); t=$(sf_param "$(member ip)" t)
expect_eq "$c $(member ip | sed 's/;t=.*//') $(member tenant | sed 's/;t=.*//')" '200 "ip";r=1 "tenant";r=7' \
	"the hidden rule's 429 charged neither ip (r=1 after 2 passes) nor tenant (r=7 after 3)"
[ -n "$t" ] && [ "$t" -ge "$lo" ] 2>/dev/null && [ "$t" -le 20 ]
ok $? "ip's t is 20 s since .3's first request, counted down: $lo..20 (got '$t')"

# ---- denied by the ip rule ---------------------------------------------------
codes=""
t2=$EPOCHREALTIME	# t2's units refill 6 s apart from its first request
for i in 1 2 3; do codes="$codes $(from 1 -H 'X-Tenant: t2' "$URL/")"; done
expect_eq "$codes" " 200 200 200" "3 requests from 127.0.0.1 pass (ip burst 3)"
expect_eq "$(member tenant | sed 's/;t=.*//')" '"tenant";r=7' "tenant t2 at r=7"
before=$(tat t2)
c=$(from 1 -H 'X-Tenant: t2' "$URL/")
expect_eq "$c" 429 "the 4th from 127.0.0.1: 429"
expect_eq "$(policy_of_body)" ip "decided by the ip rule"
rl=$(hdr RateLimit); rp=$(hdr RateLimit-Policy); ra=$(hdr Retry-After)
[[ $rl =~ $RL_RE ]]; ok $? "429 by ip: RateLimit lists exactly ip, tenant ('$rl')"
[[ $rp =~ $RP_RE ]]; ok $? "429 by ip: RateLimit-Policy lists exactly ip, tenant ('$rp')"
t=$(sf_param "$(member ip)" t)
expect_eq "$(sf_param "$(member ip)" r)" 0 "429 by ip: ip r=0"
is_posint "$ra" && is_posint "$t" && [ "$ra" -ge "$t" ]
ok $? "Retry-After ($ra) >= t of the deciding ip rule ($t)"
lo=$(since_ceil "$t2" 20)	# .1's first unit frees 20 s after its first request
[ "${ra:-0}" -ge "$lo" ] && [ "${ra:-0}" -le 20 ]; ok $? "Retry-After is 60/3 s since .1's first request: $lo..20 (got '$ra')"
from 1 -H 'X-Tenant: t2' "$URL/" >/dev/null
after=$(tat t2)
[ -n "$before" ] && [ "$before" = "$after" ]
ok $? "two requests denied by ip left the tenant's TAT in Redis unchanged ($before -> $after)"
c=$(from 4 -H 'X-Tenant: t2' "$URL/")
# 4 charged of 10 leaves 6, plus a unit per 6 s since t2's first request
# (none when quick; a charged denial would make it 5)
hi=$((6 + $(awk -v a="$t2" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) / 6 }')))
r=$(sf_param "$(member tenant)" r)
[ "$c" = 200 ] && [ -n "$r" ] && [ "$r" -ge 6 ] 2>/dev/null && [ "$r" -le "$hi" ]
ok $? "the next allowed request of t2 (from .4) sees r=6 (to $hi): the denied ones cost nothing (got $c r=$r)"

# ---- denied by the tenant rule -----------------------------------------------
codes=""
for n in $(seq 10 19); do codes="$codes $(from "$n" -H 'X-Tenant: t3' "$URL/")"; done
expect_eq "$codes" "$(printf ' 200%.0s' $(seq 10))" "tenant t3: 10 requests from 10 addresses pass"
c=$(from 20 -H 'X-Tenant: t3' "$URL/")
expect_eq "$c" 429 "the 11th of t3: 429"
expect_eq "$(policy_of_body)" tenant "decided by the tenant rule"
rl=$(hdr RateLimit); ra=$(hdr Retry-After)
[[ $rl =~ $RL_RE ]]; ok $? "429 by tenant: RateLimit lists exactly ip, tenant ('$rl')"
t=$(sf_param "$(member tenant)" t)
expect_eq "$(sf_param "$(member tenant)" r)" 0 "429 by tenant: tenant r=0"
is_posint "$ra" && is_posint "$t" && [ "$ra" -ge "$t" ]
ok $? "Retry-After ($ra) >= t of the deciding tenant rule ($t)"
c=$(from 20 -H 'X-Tenant: t4' "$URL/")
expect_eq "$c $(member ip)" '200 "ip";r=2;t=20' "the tenant's 429 did not charge ip 127.0.0.20 (r=2 on its next request)"

# ---- the global header mode (reloaded with SIGHUP) ----------------------------
# headers_mode MODE N: the policy with "headers: MODE", reload number N.
headers_mode() {
	{ echo "headers: $1"; grep -v '^headers:' "$POLICY"; } >"$TMP/new.yaml"
	mv "$TMP/new.yaml" "$POLICY"
	hup reloaded "$2"
}
# xrl: the three legacy fields of the last response, "-" for an absent one.
xrl() {
	echo "$(hdr X-RateLimit-Limit)/$(hdr X-RateLimit-Remaining)/$(hdr X-RateLimit-Reset)" |
		sed 's#^/#-/#; s#//#/-/#g; s#/$#/-#'
}
headers_mode legacy 1; ok $? "reloaded with headers: legacy"
t30=$EPOCHREALTIME	# .30's reset counts down 20 s from its first request
c=$(from 30 -H 'X-Tenant: t5' "$URL/")
expect_eq "$c $(xrl) [$(hdr RateLimit)][$(hdr RateLimit-Policy)]" '200 3/2/20 [][]' \
	"legacy, allowed: X-RateLimit-* of the deciding ip rule (3/min: limit 3, remaining 2, reset 20 s), no IETF fields"
from 30 -H 'X-Tenant: t5' "$URL/" >/dev/null; from 30 -H 'X-Tenant: t5' "$URL/" >/dev/null
c=$(from 30 -H 'X-Tenant: t5' "$URL/"); x=$(xrl)
expect_eq "$c ${x%/*} $(policy_of_body) [$(hdr RateLimit)]" '429 3/0 ip []' "legacy, 429: X-RateLimit-Limit 3, Remaining 0, no IETF fields"
r=${x##*/}; ra=$(hdr Retry-After)
lo=$(since_ceil "$t30" 20)
is_posint "$r" && [ "$r" -ge "$lo" ] && [ "$r" -le 20 ] && [ "$ra" -ge "$r" ]
ok $? "legacy, 429: X-RateLimit-Reset 20 s since .30's first request: $lo..20 ($r), not after Retry-After ($ra)"
headers_mode both 2; ok $? "reloaded with headers: both"
c=$(from 31 -H 'X-Tenant: t5' "$URL/")
expect_eq "$c $(xrl) $(member ip)" '200 3/2/20 "ip";r=2;t=20' "both: the legacy fields and the IETF ones"
[[ $(hdr RateLimit-Policy) =~ $RP_RE ]]; ok $? "both: RateLimit-Policy lists exactly ip, tenant"
headers_mode none 3; ok $? "reloaded with headers: none"
c=$(from 32 -H 'X-Tenant: t5' "$URL/")
expect_eq "$c $(xrl) [$(hdr RateLimit)][$(hdr RateLimit-Policy)]" '200 -/-/- [][]' "none: no rate-limit header at all"
headers_mode ietf 4; ok $? "reloaded with headers: ietf"
c=$(from 33 -H 'X-Tenant: t5' "$URL/")
expect_eq "$c $(xrl) $(member ip)" '200 -/-/- "ip";r=2;t=20' "ietf: the IETF fields only"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"
! grep -q 'rl_degraded=1' "$TMP/haproxy.log"
ok $? "no degraded decision"

finish
