#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A reservation larger than any budget never fits (429, nothing held),
# however it is written. X-Max-Tokens is the client's own header: written
# with more digits than an int64 holds (20 nines) it read as malformed,
# so it reserved 0 and the request was admitted with nothing held while
# 999999999999999999 (18 digits) was refused; leading zeros made 300 a
# malformed 0 too. Here gcra 1000/d, burst 1000.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
redis_agent_up 1 500ms <<YAML || { ok 1 "the agent starts"; finish; }
processing_timeout: 1s
rules:
$(reserve_rule tok rl-tok rl-tok-res)
YAML
c() { timeout 10 "$CLIENT" -a "127.0.0.1:$AP" "$@" | grep '^ack'; }
req() { c rl-tok tenant=s:a id=s:$1 max_tokens=s:$2; }
for n in 999999999999999999 99999999999999999999 \
	100000000000000000000000000000; do
	out=$(req "big${#n}" "$n")
	expect_eq "$(echo "$out" | field status)" 429 \
		"a reservation of ${#n} digits never fits ($out)"
	expect_eq "$(rc "$RP" exists "rl:{tok:t:a}:r:big${#n}")" 0 \
		"a reservation of ${#n} digits holds no record"
done
expect_eq "$(req z 0000000000000000000300 | field remaining)" 700 \
	"leading zeros: 300 held"
finish
