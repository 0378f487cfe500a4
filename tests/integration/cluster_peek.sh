#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# On redis+cluster://, a request refused by a peek (the request-phase
# check of a count: response or count: failures rule, "would one more
# unit pass?") in one slot is charged nowhere, as on one Redis, where the
# script vetoes the request on that peek: the reservation and the lease
# its other rules took in other slots are refunded (record and slot
# freed). And a peek that passed is never "refunded" when another slot
# refuses the request: it charged nothing, and giving a unit back erased
# a counted response (a failure) per refused request.
#   1. one 5xx spends the err rule's limit of 1: its peek then refuses;
#   2. a request of the three rules (a reservation, a lease, the peek, the
#      peek's key in a slot of its own) is 429: no record, no lease, the
#      units all there;
#   3. the err rule of a fresh user is spent to 1 of 2 (its peek passes),
#      the burst-1 rule of another slot refuses the request: the counted
#      5xx stays.
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
  - name: conc
    message: rl-mix
    key: "c:{tenant}"
    algorithm: concurrency
    limit: 5
    lease: 1h
    id: "{id}"
    release: rl-done
    fail: closed
  - name: err
    message: rl-mix
    key: "e:{user}"
    algorithm: sliding-window
    limit: 1
    window: 1h
    count: response
    status: 5xx
    result_message: rl-err
    fail: closed
  - name: err2
    message: rl-two
    key: "e2:{user}"
    algorithm: sliding-window
    limit: 2
    window: 1h
    count: response
    status: 5xx
    result_message: rl-err2
    fail: closed
  - name: one
    message: rl-two
    key: "u:{tenant}"
    algorithm: gcra
    rate: 1/d
    burst: 1
    fail: closed
YAML
} >"$TMP/policy.yaml"
agent_up "$TMP/policy.yaml" || { ok 1 "the agent starts"; finish; }
slot() { rcc cluster keyslot "$1"; }
e=$(slot 'rl:{err:e:u1}')
[ "$e" != "$(slot 'rl:{rsv:r:acme}')" ] && [ "$e" != "$(slot 'rl:{conc:c:acme}')" ]
ok $? "the peek's key is in another slot than the reservation's and the lease's"
[ "$(slot 'rl:{err2:e2:u2}')" != "$(slot 'rl:{one:u:acme}')" ]
ok $? "the passing peek's key is in another slot than the refusing rule's"
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@" | grep '^ack'; }

# ---- a peek that refuses vetoes the other slots' charges -----------------
c rl-err user=s:u1 status=i:500 >/dev/null
out=$(c rl-mix tenant=s:acme user=s:u1 id=s:m1 max_tokens=s:300)
expect_eq "$(echo "$out" | field status)" 429 "the spent err rule refuses ($out)"
expect_eq "$(rcc exists 'rl:{rsv:r:acme}:r:m1')" 0 \
	"the refused request holds no reservation record"
expect_eq "$(rcc zcard 'rl:{conc:c:acme}')" 0 \
	"the refused request holds no lease"
expect_eq "$(rcc exists 'rl:{rsv:r:acme}')" 0 \
	"the refused request's reservation was given back (no TAT left)"

# ---- a peek that passed is not refunded --------------------------------
expect_eq "$(c rl-two tenant=s:acme user=s:u2 | field status)" 0 \
	"a fresh user and tenant pass"
c rl-err2 user=s:u2 status=i:500 >/dev/null
expect_eq "$(c rl-two tenant=s:acme user=s:u2 | field status)" 429 \
	"the burst-1 rule refuses the next (err2: 1 of 2 spent)"
c rl-err2 user=s:u2 status=i:500 >/dev/null
sleep 1.2 # past the near-cache's hold of the burst-1 rule's denial
out=$(c rl-two tenant=s:zz user=s:u2)
expect_eq "$(echo "$out" | field status)" 429 \
	"two 5xx spend err2's limit of 2, whatever the refusals between ($out)"
finish
