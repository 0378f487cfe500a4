#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A refund on redis+cluster:// gives back what the charge took, not its
# cost. A response message charges a charge: response rule (op FORCE) and
# checks a burst-1 rule in another slot; when that rule denies, the FORCE
# is refunded (refund.lua). A FORCE past the burst is capped (GCRA: a TAT
# at most now + 2 tolerance; token bucket: at most -burst tokens), so it
# takes less than its cost; refunding the cost used to leave the key
# fresher than before the denied request (GCRA 1/h burst 5 at TAT now+5h,
# a FORCE of 20 stored now+10h, the refund took 11h back and deleted the
# key: 5 more requests allowed; the token bucket went from 0 to 5 tokens).
. "$(dirname "$0")/../lib.sh"
P1=$(port 1); P2=$(port 2); P3=$(port 3); AP=$(port 4)
rcc() { redis-cli -c -h 127.0.0.1 -p "$P1" "$@" 2>/dev/null; }

cluster3_up "$P1" "$P2" "$P3"

# a charge: response rule of rate 1/h, burst 5: name, key prefix, algorithm
charged_rule() {
	cat <<YAML
  - name: $1
    message: rl-req
    key: "$2:{tenant}"
    algorithm: $3
    rate: 1/h
    burst: 5
    charge: response
    cost: "{cost}"
    result_message: rl-res
    fail: closed
YAML
}
{
	policy_top "$AP" "redis+cluster://127.0.0.1:$P1,127.0.0.1:$P2" 200ms 2
	printf 'processing_timeout: 1s\nrules:\n'
	charged_rule rg g gcra
	charged_rule rtb b token-bucket
	cat <<YAML
  - name: one
    message: rl-res
    key: "u:{user}"
    algorithm: gcra
    rate: 1/d
    burst: 1
    fail: closed
YAML
} >"$TMP/policy.yaml"
agent_up "$TMP/policy.yaml" || { ok 1 "the agent starts"; finish; }
G='rl:{rg:g:acme}'; B='rl:{rtb:b:acme}'; U='rl:{one:u:u1}'
distinct_slots "$P1" "$G" "$B" "$U"
ok $? "the three rules' keys are in three slots"
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@" | grep '^ack'; }
# whole tokens left (t in millionths; at 1/h the refill during the test is
# far under one)
tb() { echo $(( $(rcc hget "$B" t || echo 0) / 1000000 )); }

c rl-res tenant=s:acme user=s:u1 status=i:200 cost=i:5 >/dev/null
tat0=$(rcc get "$G")
now=$(( $(rcc time | head -1) * 1000000 ))
[ -n "$tat0" ] && [ $(( ${tat0%%.*} - now )) -gt $(( 4 * 3600000000 )) ]
ok $? "a response of cost 5 spent the gcra key's burst (TAT now+5h: ${tat0:-none})"
expect_eq "$(tb)" 0 "and the token bucket's 5 tokens"
expect_eq "$(c rl-res tenant=s:acme user=s:u1 status=i:200 cost=i:20 | field status)" 429 \
	"the next response, of cost 20, is denied by the burst-1 rule in another slot"
expect_eq "$(rcc get "$G")" "$tat0" \
	"gcra: the denied response's capped FORCE of 20 is refunded to the TAT before it"
expect_eq "$(tb)" 0 \
	"token bucket: the denied response's capped FORCE of 20 is refunded to 0 tokens, not 5"
! grep -q 'redis_refund_lost' "$TMP/agent.log"; ok $? "no refund was lost"
finish
