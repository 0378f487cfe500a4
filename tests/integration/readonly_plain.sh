#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# BUG: a plain redis:// (or unix:) URL kept its link to a master demoted
# under it. A failover that moves the address (a DNS name, a managed
# Redis's endpoint) leaves the old master up as a replica, which keeps the
# agent's connection open and answers every call READONLY: every decision
# went to the fail mode (503 for fail: closed) for as long as that
# connection lived. A READONLY (or MASTERDOWN) reply now drops the link,
# whatever the URL, and the reconnect, at the backoff pace, goes wherever
# the address leads now.
#
# The address is a unix socket path, a symlink moved from the old master's
# socket to the new one's: what a DNS failover does to a host name.
. "$(dirname "$0")/../lib.sh"
RA=$(port 1); RB=$(port 2); AP=$(port 3)
start_redis "$RA" --unixsocket "$TMP/a.sock"
ok $? "redis A (the master) up on $RA"
start_redis "$RB" --unixsocket "$TMP/b.sock"
ok $? "redis B (the master to be) up on $RB"
ln -s "$TMP/a.sock" "$TMP/redis.sock"
cat >"$TMP/p.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "unix:$TMP/redis.sock", timeout: 50ms }
rules:
  - { name: t, message: rl-request, key: "t:{tenant}", rate: 10/min, burst: 100, fail: closed }
YAML
start_agent "$TMP/p.yaml"
wait_port "$AP"
until_ok 30 grep -q redis_connected "$TMP/agent.log"
ok $? "the agent is connected to A"
grep -q "msg=redis_connected path=$TMP/redis.sock\( \|\$\)" "$TMP/agent.log" &&
	! grep -q 'host= port=' "$TMP/agent.log"
ok $? "its log lines name the socket's path, not an empty host and a port"

# verdict: "status/degraded" of one request
verdict() {
	"$CLIENT" -a "127.0.0.1:$AP" rl-request tenant=s:acme | grep '^ack' |
		sed 's/.* status=\([0-9]*\).* degraded=\([0-9]*\).*/\1\/\2/'
}
expect_eq "$(verdict)" "0/0" "a decision from Redis A"

# the failover: B promoted, A demoted to its replica, the address moved
rc "$RA" replicaof 127.0.0.1 "$RB" >/dev/null
ln -sfn "$TMP/b.sock" "$TMP/redis.sock"
decided() { [ "$(verdict)" = "0/0" ]; }
until_ok 40 decided
ok $? "after the failover, decisions from Redis again (B), not 503 from READONLY"
grep -q 'READONLY' "$TMP/agent.log"
ok $? "the agent saw READONLY from the demoted master"
[ "$(rc "$RB" exists 'rl:{t:t:acme}')" = 1 ]
ok $? "the new master holds the key: the agent reconnected to it"
n=$(grep -c redis_connected "$TMP/agent.log")
sleep 1
expect_eq "$(grep -c redis_connected "$TMP/agent.log")" "$n" \
	"and stays there: no reconnect while B answers"
finish
