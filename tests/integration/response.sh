#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The response phase against a real redis-server, through the agent (issue
# 19): for each algorithm that takes a response's cost (gcra, token-bucket,
# fixed-window, sliding-window, sliding-log), in Redis and in the local
# tier (store: local, the C twins), a charge: response rule with a budget
# of 5:
#   - the request phase charges nothing and sets rl.response=1 (so HAProxy
#     sends rl-response), while a unit is left;
#   - rl-response charges the reported cost (3, then 3: in debt, 6 of 5);
#   - a request in debt is 429 with a Retry-After, and sets no rl.response;
#   - malformed costs (negative, fractional, not a number, over 2^53,
#     missing) charge nothing;
# and a count: response rule with status: 5xx is charged only by 5xx.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
start_redis "$RP"
{
	cat <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms }
processing_timeout: 1s
rules:
YAML
	for store in redis local; do
		for a in gcra token-bucket fixed-window sliding-window sliding-log; do
			case $a in
			gcra|token-bucket) lim="rate: 5/h
    burst: 5";;
			*) lim="limit: 5
    window: 1h";;
			esac
			cat <<YAML
  - name: $a-$store
    message: rl-$a-$store
    key: "t:{tenant}"
    algorithm: $a
    $lim
    store: $store
    charge: response
    cost: "{cost}"
    result_message: rl-$a-$store-response
YAML
		done
	done
	cat <<YAML
  - name: errors
    message: rl-err
    key: "ip:{ip}"
    algorithm: sliding-window
    limit: 2
    window: 1h
    count: response
    status: 5xx
    result_message: rl-err-response
YAML
} >"$TMP/policy.yaml"
"$AGENT" -c -f "$TMP/policy.yaml" >"$TMP/check.out" 2>&1
ok $? "the policy is valid ($(head -c 300 "$TMP/check.out"))"
agent_up "$TMP/policy.yaml"
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@"; }
acks() { c "$@" | grep '^ack'; }

for store in redis local; do
	for a in gcra token-bucket fixed-window sliding-window sliding-log; do
		m=rl-$a-$store; r=$m-response; t=s:$a-$store
		out=$(acks $m tenant=$t)
		echo "$out" | grep -q 'status=0' && echo "$out" | grep -q 'response=1'
		ok $? "$a ($store): a fresh key passes and asks for rl-response"
		acks $r tenant=$t status=i:200 cost=s:3 >/dev/null
		out=$(acks $m tenant=$t)
		echo "$out" | grep -q 'status=0'
		ok $? "$a ($store): 3 of 5 spent: passes ($out)"
		for bad in s:-1 s:2.5 s:abc s:9007199254740993 i:-4 n:; do
			acks $r tenant=$t status=i:200 cost=$bad >/dev/null
		done
		out=$(acks $m tenant=$t)
		echo "$out" | grep -q 'status=0'
		ok $? "$a ($store): malformed costs charged nothing"
		acks $r tenant=$t status=i:500 cost=s:3 >/dev/null
		out=$(acks $m tenant=$t)
		echo "$out" | grep -q 'status=429'
		ok $? "$a ($store): 6 of 5 spent (in debt): 429"
		echo "$out" | grep -q 'retry_after=[1-9]' && ! echo "$out" | grep -q 'response='
		ok $? "$a ($store): with a Retry-After, and no rl-response ($out)"
	done
done

# ---- counting by status -----------------------------------------------------
for st in 200 404 429 302 499; do
	acks rl-err-response ip=4:192.0.2.7 status=i:$st >/dev/null
done
expect_eq "$(acks rl-err ip=4:192.0.2.7 | field status)" 0 \
	"status: 5xx: 2xx/3xx/4xx responses are not counted"
acks rl-err-response ip=4:192.0.2.7 status=i:500 >/dev/null
acks rl-err-response ip=4:192.0.2.7 status=s:503 >/dev/null
expect_eq "$(acks rl-err ip=4:192.0.2.7 | field status)" 429 \
	"status: 5xx: two 5xx spend the limit of 2"
expect_eq "$(acks rl-err ip=4:192.0.2.8 | field status)" 0 \
	"another IP is not affected"
finish
