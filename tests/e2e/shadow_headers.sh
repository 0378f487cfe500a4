#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A shadow rule is reported to the operator (txn.rl.shadow in HAProxy's
# log, metrics), never to the client: RateLimit and RateLimit-Policy,
# through the shipped haproxy.cfg, name only the rules in force. A
# client that honours RateLimit would otherwise stop at a shadow rule's
# r=0, which the server never enforces, and RateLimit-Policy would
# announce a quota that is not one (the man page: "evaluate and report
# (txn.rl.shadow, metrics), never deny"; the legacy X-RateLimit-* fields
# never came from a shadow rule either).
#   - an enforced "tenant" (10/min burst 10) and a shadow "trial" (2/min
#     burst 2): 4 requests all pass, the fields list "tenant" only, and
#     rl_shadow=1 is logged for the two past trial's burst;
#   - a 429 of "tenant" lists "tenant" only;
#   - the global `shadow: true` (SIGHUP): no RateLimit field at all on
#     the 200s that a rule in force would have refused.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

rules() {
	cat <<EOF
rules:
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    rate: 10/min
    burst: 10
    missing: deny
  - name: trial
    message: rl-request
    key: "trial:{tenant}"
    rate: 2/min
    burst: 2
    shadow: true
    missing: skip
EOF
}
{ policy_head 50ms; rules; } >"$POLICY"
policy_valid "the policy is valid"
start_stack
ok $? "stack up, agent UP"

RL_RE='^"tenant";r=[0-9]+;t=[0-9]+$'
RP_RE='^"tenant";q=10;w=60$'
# fields: the last response's RateLimit and RateLimit-Policy, as one line.
fields() { echo "[$(hdr RateLimit)] [$(hdr RateLimit-Policy)]"; }

codes=""; bad=""
for i in 1 2 3 4; do
	codes="$codes $(req -H 'X-Tenant: a' "$URL/")"
	[[ $(hdr RateLimit) =~ $RL_RE ]] && [[ $(hdr RateLimit-Policy) =~ $RP_RE ]] ||
		bad="$bad $i:$(fields)"
done
expect_eq "$codes" " 200 200 200 200" "4 requests of tenant a pass (trial is shadow)"
expect_eq "$bad" "" "RateLimit and RateLimit-Policy name the tenant rule only, never the shadow one"
expect_eq "$(grep -c 'rl_shadow=1' "$TMP/haproxy.log")" 2 \
	"the two requests past trial's burst are reported in HAProxy's log (rl_shadow=1)"

# tenant b spends tenant's 10 in one curl, then one more: 429
curl -s -o /dev/null --max-time 10 -H 'X-Tenant: b' "$URL/?i=[1-10]"
c=$(req -H 'X-Tenant: b' "$URL/")
expect_eq "$c" 429 "the 11th request of tenant b: 429 (tenant)"
[[ $(hdr RateLimit) =~ $RL_RE ]] && [[ $(hdr RateLimit-Policy) =~ $RP_RE ]]
ok $? "the 429 names the tenant rule only ($(fields))"

# ---- the global switch ---------------------------------------------------------
{ echo "shadow: true"; policy_head 50ms; rules; } >"$POLICY"
hup reloaded 1; ok $? "reloaded with shadow: true"
c=$(req -H 'X-Tenant: b' "$URL/")
expect_eq "$c $(fields)" "200 [] []" "shadow: true: tenant b passes, with no RateLimit field of a rule not in force"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"

finish
