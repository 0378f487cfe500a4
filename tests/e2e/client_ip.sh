#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The client's address behind a proxy, through the shipped haproxy.cfg, on
# a per-IP rule (3 per hour, key "ip:{ip}"):
#   1. nothing trusted (RL_TRUSTED_PROXIES unset): requests that forge a
#      new X-Forwarded-For each time still count on the peer's address:
#      3 pass, then 429, and Redis holds no key of a forged address;
#   2. the PROXY protocol (RL_BIND_PROXY, accept-proxy): each client named
#      by the header has its own bucket; a connection without the header
#      is refused;
#   3. RL_TRUSTED_PROXIES="192.0.2.0/24 127.0.0.1" (a list of two): from
#      127.0.0.1 the last X-Forwarded-For hop is the client, one bucket
#      per client, whatever earlier hops say; from 127.0.0.2, not in the
#      list, forged headers change nothing.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

PROXY_PORT=$(port 5)
export RL_BIND_PROXY="127.0.0.1:$PROXY_PORT"
unset RL_TRUSTED_PROXIES
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
EOF
} >"$POLICY"
policy_valid "the per-IP policy is valid"
start_stack
ok $? "stack up (nothing trusted), agent UP"

# xff_codes FROM XFF...: one request from source address FROM per XFF
# value, each with X-Forwarded-For: XFF; the codes.
xff_codes() {
	local from=$1 x
	shift
	for x in "$@"; do
		printf ' %s' "$(req --interface "$from" -H "X-Forwarded-For: $x" "$URL/")"
	done
}
# proxy_code CLIENT: one request on the accept-proxy listener, its PROXY
# v1 header naming CLIENT; the status code ("000" when refused).
proxy_code() {
	local c
	c=$( (
		exec 3<>"/dev/tcp/127.0.0.1/$PROXY_PORT" || exit 1
		printf 'PROXY TCP4 %s 127.0.0.1 40000 %s\r\n' "$1" "$PROXY_PORT" >&3
		printf 'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3
		timeout 2 head -n 1 <&3
	) 2>/dev/null | awk '{ print $2 }')
	echo "${c:-000}"
}
# ip_keys: the per-IP keys Redis holds, one per line, sorted.
ip_keys() { rc "$REDIS_PORT" --scan --pattern '*ip:*' | sort; }

# ---- 1. nothing trusted: forged X-Forwarded-For --------------------------
expect_eq "$(xff_codes 127.0.0.1 203.0.113.1 203.0.113.2 203.0.113.3 \
	203.0.113.4 '203.0.113.5, 198.51.100.5')" " 200 200 200 429 429" \
	"untrusted peer, a new forged X-Forwarded-For each time: one bucket (3 then 429)"
keys=$(ip_keys)
! echo "$keys" | grep -q -e 203.0.113 -e 198.51.100
ok $? "no key of a forged address in Redis ($(echo $keys))"
echo "$keys" | grep -q '127\.0\.0\.1'
ok $? "the key is the peer's address ($(echo $keys))"

# ---- 2. PROXY protocol ------------------------------------------------------
expect_eq "$(for i in 1 2 3 4; do printf ' %s' "$(proxy_code 198.51.100.7)"; done)" \
	" 200 200 200 429" "PROXY protocol: client 198.51.100.7 has its own bucket (3 then 429)"
expect_eq "$(proxy_code 198.51.100.8)" 200 \
	"PROXY protocol: client 198.51.100.8 is counted apart"
ip_keys | grep -q '198\.51\.100\.7'
ok $? "PROXY protocol: the key is the client's address from the header"
c=$(req --interface 127.0.0.3 "http://127.0.0.1:$PROXY_PORT/")
[ "$c" != 200 ] && [ "$c" != 429 ]
ok $? "the accept-proxy listener refuses a request without the PROXY header (got $c)"

# ---- 3. trusted proxies -------------------------------------------------------
kill "$HAPROXY_PID"; wait "$HAPROXY_PID" 2>/dev/null
export RL_TRUSTED_PROXIES="192.0.2.0/24 127.0.0.1"
"$HAPROXY" -c -f "$HAP_CFG" >"$TMP/check.out" 2>&1 &&
	! grep -q -E 'WARNING|ALERT' "$TMP/check.out"
ok $? "haproxy -c accepts RL_TRUSTED_PROXIES with no warning"
start_haproxy "$HAP_CFG"
wait_port "$HAP_PORT" 10 && wait_srv_state 2 10
ok $? "haproxy restarted with RL_TRUSTED_PROXIES='$RL_TRUSTED_PROXIES', agent UP"

expect_eq "$(xff_codes 127.0.0.1 203.0.113.10 203.0.113.10 203.0.113.10 \
	203.0.113.10)" " 200 200 200 429" \
	"trusted proxy: client 203.0.113.10 has its own bucket (3 then 429)"
expect_eq "$(xff_codes 127.0.0.1 203.0.113.11)" " 200" \
	"trusted proxy: client 203.0.113.11 is counted apart"
expect_eq "$(xff_codes 127.0.0.1 '198.51.100.1, 203.0.113.10' \
	'198.51.100.2, 203.0.113.10')" " 429 429" \
	"trusted proxy: only the last hop counts (forged earlier hops: still 203.0.113.10's bucket)"
keys=$(ip_keys)
echo "$keys" | grep -q '203\.0\.113\.10' && echo "$keys" | grep -q '203\.0\.113\.11'
ok $? "trusted proxy: the keys are the forwarded clients' addresses"
! echo "$keys" | grep -q '198\.51\.100\.[12]$'
ok $? "trusted proxy: no key of an earlier, forged hop ($(echo $keys))"
expect_eq "$(xff_codes 127.0.0.2 203.0.113.20 203.0.113.21 203.0.113.22 \
	203.0.113.23)" " 200 200 200 429" \
	"127.0.0.2 is not in the list: forged X-Forwarded-For, one bucket (3 then 429)"
! ip_keys | grep -q '203\.0\.113\.2[0-3]'
ok $? "no key of the addresses 127.0.0.2 forged"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE errors in the haproxy log"

finish
