#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# rl-done's release in the same NOTIFY as an rl-request (a
# spoe-group of both, which spop-client's "+" sends) must free the lease
# even when the rl-request is denied: by Redis (the script's veto), or at
# once in process (a store: local rule).
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
redis_agent_up 1 50ms <<YAML
rules:
  - name: cc
    message: rl-request
    key: "cc:{tenant}"
    algorithm: concurrency
    limit: 1
    lease: 10m
    id: "{id}"
    release: rl-done
  - name: g
    message: rl-request
    key: "g:{user}"
    algorithm: gcra
    rate: 1/h
    burst: 1
YAML
ok $? "agent up"
c() { timeout 10 "$CLIENT" -t 3000 -a "127.0.0.1:$AP" "$@" | grep '^ack' | field status | tr '\n' ' '; }
expect_eq "$(c rl-request tenant=s:A user=s:U id=s:r1)" "0 " "A takes its one slot (and U its one unit)"
expect_eq "$(c rl-request tenant=s:B user=s:U id=s:r2 + rl-done tenant=s:A id=s:r1)" \
	"429 " "B is denied (U is spent), in the NOTIFY that releases A's r1"
sleep 0.3
expect_eq "$(redis-cli -p "$RP" --raw zcard "rl:{cc:cc:A}")" "0" "A's lease r1 was released"
expect_eq "$(c rl-request tenant=s:A user=s:V id=s:r3)" "0 " "A's slot is free again"

# the same, with the rl-request denied at once, in process
cat >>"$TMP/policy.yaml" <<YAML
  - name: loc
    message: rl-request2
    key: "l:{user}"
    algorithm: gcra
    rate: 1/h
    burst: 1
    store: local
  - name: cc2
    message: rl-request2
    key: "cc2:{tenant}"
    algorithm: concurrency
    limit: 1
    lease: 10m
    id: "{id}"
    release: rl-done2
YAML
kill -HUP "$AGENT_PID"
until_ok 50 grep -q 'msg=reloaded' "$TMP/agent.log"; ok $? "reloaded with rl-request2"
expect_eq "$(c rl-request2 tenant=s:A user=s:U id=s:q1)" "0 " "A takes its one cc2 slot (U its one local unit)"
expect_eq "$(c rl-request2 tenant=s:B user=s:U id=s:q2 + rl-done2 tenant=s:A id=s:q1)" \
	"429 " "B is denied at once (U is spent locally), in the NOTIFY that releases A's q1"
sleep 0.3
expect_eq "$(redis-cli -p "$RP" --raw zcard "rl:{cc2:cc2:A}")" "0" "A's cc2 lease q1 was released"
finish
