#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A Redis host given by name whose DNS server never answers. hiredis 0.14
# resolves inside redisAsyncConnect(), blocking: each reconnect froze the
# worker for the resolver's whole timeout, and every SPOP connection on it
# with it. Names are now resolved by resolve.c's thread: requests get
# their fail mode at once, and once the name resolves (here: /etc/hosts)
# the agent connects by itself.
#
# Runs in a private network and mount namespace (unshare, as root) with
# its own resolv.conf pointing at a UDP port nobody reads; skipped where
# unshare is not allowed.
. "$(dirname "$0")/../netns.sh"
. "$(dirname "$0")/../lib.sh"
ip link set lo up
RP=$(port 1); AP=$(port 2)
printf 'nameserver 127.0.0.1\noptions timeout:3 attempts:2\n' >"$TMP/resolv.conf"
cp /etc/hosts "$TMP/hosts"
mount --bind "$TMP/resolv.conf" /etc/resolv.conf
mount --bind "$TMP/hosts" /etc/hosts
"$TOOLS/blackhole" -u 53 120 >"$TMP/dns.out" &
PIDS="$PIDS $!"
until_ok 50 grep -q ready "$TMP/dns.out"; ok $? "a DNS server that never answers"
start_redis "$RP"
cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis://redis-under-test.example:$RP/0", timeout: 100ms }
processing_timeout: 1s
rules:
  - { name: t, message: rl-request, key: "t:{tenant}", rate: 1000/s, burst: 1000, fail: open }
YAML
AGENT_WAIT_S=20 agent_up "$TMP/policy.yaml"
# every request is answered well inside 1 s though each lookup takes 6 s
out=$("$TOOLS/spop-client" -a "127.0.0.1:$AP" -t 1000 -n 20 -g 100 rl-request tenant=s:a 2>&1)
expect_eq "$(echo "$out" | grep -c '^ack .*status=0 .*degraded=1')" 20 \
	"20 requests over 2 s: each answered by its fail mode (open)"
grep -q 'msg=resolve_failed host=redis-under-test.example' "$TMP/agent.log" ||
	grep -q 'error="resolving the host name"' "$TMP/agent.log"
ok $? "the connect attempts say why (the name does not resolve yet)"
echo "127.0.0.1 redis-under-test.example" >>"$TMP/hosts"
by_redis() {
	"$TOOLS/spop-client" -a "127.0.0.1:$AP" -t 1000 rl-request tenant=s:a |
		grep -q 'degraded=0'
}
until_ok 150 by_redis
ok $? "once the name resolves, the agent connects and Redis decides"
grep -q 'msg=resolved host=redis-under-test.example addr=127.0.0.1' "$TMP/agent.log"
ok $? "the address is logged"
finish
