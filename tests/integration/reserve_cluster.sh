#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Reserve, then settle on redis+cluster:// (three masters on loopback): the
# reservation's record lives in its key's slot, and a request whose other
# rule, in another slot, denies it is refunded there with its record gone
# (refund.lua), so a later settle finds nothing to refund twice:
#   1. a request of a reserving rule (gcra, 1000/d, 300 held) and a rule
#      of burst 1 in another slot passes: 300 held, its record written;
#   2. the next is denied by the burst-1 rule: its reservation is refunded
#      and its record deleted;
#   3. the first request's settle at 100 refunds 200; the second's finds
#      nothing.
. "$(dirname "$0")/../lib.sh"
P1=$(port 1); P2=$(port 2); P3=$(port 3); AP=$(port 4)
rcc() { redis-cli -c -h 127.0.0.1 -p "$P1" "$@" 2>/dev/null; }

cluster3_up "$P1" "$P2" "$P3"

{
	policy_top "$AP" "redis+cluster://127.0.0.1:$P1,127.0.0.1:$P2" 200ms 2
	cat <<YAML
processing_timeout: 1s
rules:
  - name: rsv
    message: rl-mix
    key: "r:{tenant}"
    algorithm: gcra
    rate: 1000/d
    burst: 1000
    reserve: "{max_tokens}"
    cost: "{cost}"
    fail: closed
  - name: one
    message: rl-mix
    key: "u:{user}"
    algorithm: gcra
    rate: 1/d
    burst: 1
    fail: closed
YAML
} >"$TMP/policy.yaml"
agent_up "$TMP/policy.yaml" || { ok 1 "the agent starts"; finish; }
distinct_slots "$P1" 'rl:{rsv:r:acme}' 'rl:{one:u:u1}'
ok $? "the two rules' keys are in different slots"
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@" | grep '^ack'; }
# left: the reserving rule's units left (a fresh user, 0 reserved; called
# in $(...), so the user's name cannot come from a counter)
left() {
	u=peek$RANDOM$RANDOM
	c rl-mix tenant=s:acme user=s:$u id=s:$u max_tokens=s:0 |
		sed -n 's/.*"rsv";r=\([0-9]*\).*/\1/p'
}

expect_eq "$(c rl-mix tenant=s:acme user=s:u1 id=s:m1 max_tokens=s:300 | field status)" 0 \
	"a reservation of 300 with a rule in another slot passes"
expect_eq "$(rcc exists 'rl:{rsv:r:acme}:r:m1')" 1 "its record is in the rule key's slot"
expect_eq "$(c rl-mix tenant=s:acme user=s:u1 id=s:m2 max_tokens=s:300 | field status)" 429 \
	"the next is denied by the burst-1 rule in the other slot"
expect_eq "$(rcc exists 'rl:{rsv:r:acme}:r:m2')" 0 \
	"the denied request's reservation was refunded with its record"
expect_eq "$(left)" 700 "only the first reservation is held"
c rl-response tenant=s:acme id=s:m1 status=i:200 cost=i:100 >/dev/null
expect_eq "$(left)" 900 "the first settle refunds 200"
c rl-response tenant=s:acme id=s:m2 status=i:200 cost=i:0 >/dev/null
c rl-response tenant=s:acme id=s:m1 status=i:200 cost=i:0 >/dev/null
expect_eq "$(left)" 900 "the denied request's settle and a repeat change nothing"
! grep -q 'redis_refund_lost' "$TMP/agent.log"; ok $? "no refund was lost"
finish
