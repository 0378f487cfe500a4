#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Static allow lists through the shipped haproxy.cfg (ip=src): a per-IP
# rule (2 per hour) whose allow: names the list "monitoring"
# (127.0.0.2/32 and an IPv6 range) and an inline range (127.0.1.0/24):
#   1. 127.0.0.2 (listed) passes far past the limit and leaves no key in
#      Redis (the check is never built);
#   2. 127.0.1.1, in the inline range, passes too; 127.0.0.3, in no
#      range, gets 200 200 429;
#   3. a reload that drops the list limits 127.0.0.2 like anyone.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

# policy ALLOW [LISTS]: the per-IP policy with rule allow: ALLOW, and the
# monitoring list unless LISTS is "none".
policy() {
	{
		policy_head 50ms
		[ "${2:-}" = none ] || cat <<EOF
allow_lists:
  monitoring: [127.0.0.2/32, "2001:db8:42::/48"]
EOF
		cat <<EOF
rules:
  - name: per-ip
    message: rl-request
    key: "ip:{ip}"
    algorithm: fixed-window
    limit: 2
    window: 1h
    missing: deny
    allow: $1
EOF
	} >"$POLICY"
}
# codes FROM N: N requests from source address FROM; their codes.
codes() {
	local i
	for i in $(seq "$2"); do
		printf ' %s' "$(req --interface "$1" -H 'X-Tenant: t' "$URL/")"
	done
}
ip_keys() { rc "$REDIS_PORT" --scan --pattern '*ip:*' | sort; }

policy "[monitoring, 127.0.1.0/24]"
policy_valid "the allow-list policy is valid"
start_stack
ok $? "stack up, agent UP"

expect_eq "$(codes 127.0.0.2 6)" " 200 200 200 200 200 200" \
	"127.0.0.2 (in allow list monitoring) passes past the limit of 2"
expect_eq "$(codes 127.0.1.1 4)" " 200 200 200 200" \
	"127.0.1.1 (in the inline range 127.0.1.0/24) passes past the limit"
expect_eq "$(codes 127.0.0.3 3)" " 200 200 429" \
	"127.0.0.3 (in no range) is limited: 2 then 429"
keys=$(ip_keys)
! echo "$keys" | grep -q -e '127\.0\.0\.2' -e '127\.0\.1\.1'
ok $? "no Redis key for the allowed addresses ($(echo $keys))"
echo "$keys" | grep -q '127\.0\.0\.3'
ok $? "the limited address has its key"

policy "[127.0.1.0/24]" none
policy_valid "the policy without the list is valid"
hup reloaded 1
ok $? "reloaded without the monitoring list"
expect_eq "$(codes 127.0.0.2 3)" " 200 200 429" \
	"after the reload 127.0.0.2 is limited like anyone (2 then 429)"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE errors in the haproxy log"

finish
