#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# IPv6 keys per /64 through haproxy. The shipped config passes ip=src, and
# one client address cannot vary, so this test runs copies of haproxy.cfg
# and spoe-ratelimit.conf in $TMP where the ip arg is the X-Client-IP header
# (ip=req.hdr(x-client-ip)) in rl-request and rl-login; haproxy also listens on [::1] when the machine
# has IPv6 loopback, and the requests go over it then. Rule: gcra 3/min
# burst 3 on "ip:{ip/64}".
#   2001:db8:1:2::1 and 2001:db8:1:2::ffff share a bucket (one /64);
#   2001:db8:1:3::1 (another /64) does not;
#   ::ffff:10.0.0.1 is 10.0.0.1 (IPv4-mapped is IPv4); 10.0.0.2 is not.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

HAP_PORT6=$(port 5)
# Request-phase messages only: the response-phase ones (rl-login-result,
# rl-done) cannot read request headers any more; no rule here uses them.
sed -e '/^spoe-message rl-request$/,/args/ s/ip=src/ip=req.hdr(x-client-ip)/' \
	-e '/^spoe-message rl-login$/,/args/ s/ip=src/ip=req.hdr(x-client-ip)/' \
	"$ROOT/haproxy/spoe-ratelimit.conf" >"$TMP/spoe.conf"
# The ip arg of each message, by name: the request-phase ones read the header.
ip_args=$(awk '/^spoe-message /{m=$2} /^ *args /{for(i=2;i<=NF;i++) if($i ~ /^ip=/) print m, $i}' "$TMP/spoe.conf")
expect_eq "$(echo "$ip_args" | grep -E '^rl-(request|login) ' | grep -c 'ip=req.hdr(x-client-ip)$')" "2" \
	"test SPOE conf: rl-request's and rl-login's ip arg is the X-Client-IP header"
export RL_SPOE_CONF="$TMP/spoe.conf"
v6=0
if ip -6 addr show lo 2>/dev/null | grep -q 'inet6 ::1/128'; then v6=1; fi
if [ $v6 = 1 ]; then
	sed "s|^\( *\)bind \"\${RL_BIND-:8080}\"|&\n\1bind [::1]:$HAP_PORT6|" "$HAP_CFG" >"$TMP/haproxy.cfg"
	grep -q "bind \[::1\]:$HAP_PORT6" "$TMP/haproxy.cfg"
	ok $? "test haproxy.cfg: fe_api also listens on [::1]:$HAP_PORT6"
	URL6="http://[::1]:$HAP_PORT6"
else
	cp "$HAP_CFG" "$TMP/haproxy.cfg"
	echo "# no IPv6 loopback: driving haproxy over 127.0.0.1"
	URL6=$URL
fi
HAP_CFG="$TMP/haproxy.cfg"
"$HAPROXY" -c -q -f "$HAP_CFG" >/dev/null 2>&1
ok $? "haproxy -c accepts the test config"

{
	policy_head 50ms
	cat <<EOF
rules:
  - name: ip
    message: rl-request
    key: "ip:{ip/64}"
    algorithm: gcra
    rate: 3/min
    burst: 3
    missing: deny
EOF
} >"$POLICY"
start_stack
ok $? "stack up, agent UP"

# as ADDR: one request with X-Client-IP: ADDR; prints "CODE R".
as() {
	c=$(req -H 'X-Tenant: t' -H "X-Client-IP: $1" "$URL6/")
	echo "$c $(sf_param "$(hdr RateLimit)" r)"
}

if [ $v6 = 1 ]; then
	c=$(req -H 'X-Tenant: t' -H 'X-Client-IP: 2001:db8:9::1' "$URL6/")
	expect_eq "$c" 200 "haproxy answers over [::1]"
fi

expect_eq "$(as 2001:db8:1:2::1)" "200 2" "2001:db8:1:2::1: 1st of the /64 (r=2)"
expect_eq "$(as 2001:db8:1:2::1)" "200 1" "2001:db8:1:2::1: 2nd (r=1)"
expect_eq "$(as 2001:db8:1:2::ffff)" "200 0" "2001:db8:1:2::ffff shares the /64's bucket (r=0)"
expect_eq "$(as 2001:db8:1:2:abcd:ef01:2345:6789)" "429 0" "another address of the same /64 is refused: the bucket is spent"
expect_eq "$(as 2001:DB8:1:2::1)" "429 0" "upper-case hex is the same address"
expect_eq "$(as 2001:db8:1:3::1)" "200 2" "2001:db8:1:3::1 (another /64) has its own bucket"
expect_eq "$(as 2001:db8:1:3::1)" "200 1" "... and it counts on its own"

expect_eq "$(as 10.0.0.1)" "200 2" "10.0.0.1: 1st (r=2)"
expect_eq "$(as 10.0.0.1)" "200 1" "10.0.0.1: 2nd (r=1)"
expect_eq "$(as ::ffff:10.0.0.1)" "200 0" "::ffff:10.0.0.1 shares 10.0.0.1's bucket (r=0)"
expect_eq "$(as 10.0.0.1)" "429 0" "10.0.0.1 is then refused"
expect_eq "$(as 10.0.0.2)" "200 2" "10.0.0.2 (IPv4 is the whole /32) has its own bucket"

expect_eq "$(as '')" "429 " "no X-Client-IP: missing: deny"

keys=$(redis-cli -p "$REDIS_PORT" --scan --pattern 'rl:{ip:*' | sort | tr '\n' ' ')
echo "# keys: $keys"
want='rl:{ip:ip:10.0.0.1} rl:{ip:ip:10.0.0.2} rl:{ip:ip:2001:db8:1:2::/64} rl:{ip:ip:2001:db8:1:3::/64} '
[ $v6 = 1 ] && want="${want}rl:{ip:ip:2001:db8:9::/64} "
expect_eq "$keys" "$want" "Redis holds one key per /64 (host part masked) and per IPv4 address (mapped form unwrapped)"

! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"

finish
