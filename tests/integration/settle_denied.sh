# SPDX-License-Identifier: Apache-2.0
# A settle is applied whatever its request's other checks say (limiter.h,
# "Reserve, then settle"), also when another rule of the result message
# denies that request at once, without Redis: from the near-cache. The
# script applies a settle in a call another check refuses; a request the
# agent refused at once dropped its settle instead, and the reservation
# stayed charged in full for its lease.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
{
	echo "processing_timeout: 1s"
	echo "rules:"
	reserve_rule tok rl-llm rl-llm-response
	echo "  - { name: resp, message: rl-llm-response, key: \"u:{user}\", rate: 1/h, burst: 1 }"
} >"$TMP/rules.yaml"
redis_agent_up 1 500ms <"$TMP/rules.yaml" || { ok 1 "the agent starts"; finish; }

c() { "$CLIENT" -a "127.0.0.1:$AP" "$@" | grep '^ack'; }
# req ID UNITS: a request phase of tenant acme reserving UNITS; its ack
req() { c rl-llm tenant=s:acme id=s:$1 max_tokens=s:$2; }
# settle TENANT ID COST USER: a response of USER settling ID; its status
settle() {
	c rl-llm-response tenant=s:$1 id=s:$2 status=i:200 cost=i:$3 \
		user=s:$4 | field status
}
left() { req peek 0 | field remaining; }

req r0 200 >/dev/null
expect_eq "$(req r1 300 | field remaining)" 500 "500 units held by two reservations"
expect_eq "$(settle other none 0 carol)" 0 "carol's one response of the hour passes"
expect_eq "$(settle acme r0 50 carol)" 429 "her next is refused by Redis"
expect_eq "$(left)" 650 "the script applied its settle all the same: 150 back"
expect_eq "$(settle acme r1 100 carol)" 429 \
	"the one after is refused from the near-cache"
expect_eq "$(left)" 850 "its settle is applied too: 200 back"
finish
