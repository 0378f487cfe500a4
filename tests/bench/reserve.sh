#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Redis CPU per reservation and per settle (issue 19, item 3), against a
# plain check on the same machine: one private redis-server and one agent
# (2 workers), N requests pipelined 20 deep on one SPOP connection, each on
# its own key (spop-client -u), for
#   check:    a gcra rule without reserve: (the baseline);
#   reserve:  the same rule with reserve: "{max_tokens}" (300 held, one
#             record written);
#   settle:   rl-response for each of those (cost 100: a refund, the
#             record read and deleted).
# Prints a markdown table: Redis CPU (INFO cpu, user + sys) per operation
# in µs and the script calls made (settles are batched with the rest).
# What it does not do: HAProxy, several agents (make bench does those).
# The machine may be shared: run it under flock /tmp/bench.lock.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
N=${RESERVE_N:-20000}
redis_agent_up 2 50ms <<YAML || exit 1
processing_timeout: 1s
rules:
  - name: plain
    message: rl-plain
    key: "p:{tenant}"
    rate: 1000/d
    burst: 1000
  - name: rsv
    message: rl-rsv
    key: "r:{tenant}"
    rate: 1000/d
    burst: 1000
    reserve: "{max_tokens}"
    cost: "{cost}"
    result_message: rl-rsv-response
YAML
rcpu() {
	redis-cli -p "$RP" info cpu | tr -d '\r' |
		awk -F: '/^used_cpu_(sys|user):/ {s += $2} END {printf "%.6f\n", s}'
}
# phase NAME MESSAGE ARGS...: N NOTIFYs; sets R_NAME_us and R_NAME_calls
phase() {
	local name=$1 c0 c1 k0 k1 acks
	shift
	c0=$(rcpu); k0=$(script_calls "$RP")
	acks=$("$CLIENT" -a "127.0.0.1:$AP" -t 20000 -n "$N" -P 20 -u "$@" |
		grep -c '^ack')
	c1=$(rcpu); k1=$(script_calls "$RP")
	eval "R_${name}_us=$(awk -v a="$c0" -v b="$c1" -v n="$N" \
		'BEGIN { printf "%.2f", (b - a) * 1e6 / n }')"
	eval "R_${name}_calls=$((k1 - k0))"
	eval "R_${name}_acks=$acks"
}
phase check rl-plain tenant=s:t
phase reserve rl-rsv tenant=s:t id=s:q max_tokens=i:300
phase settle rl-rsv-response tenant=s:t id=s:q status=i:200 cost=i:100
records=$(redis-cli -p "$RP" --scan --pattern '*}:r:*' | wc -l)
echo "## Reserve, then settle: Redis CPU per operation ($N each, one key each)"
echo
echo "| operation | Redis CPU µs/op | script calls | acks |"
echo "|---|---|---|---|"
echo "| check (gcra, no reserve) | $R_check_us | $R_check_calls | $R_check_acks |"
echo "| reservation (check + record) | $R_reserve_us | $R_reserve_calls | $R_reserve_acks |"
echo "| settle (record read and deleted, refund) | $R_settle_us | $R_settle_calls | $R_settle_acks |"
echo
echo "(reservation records left after the settles: $records)"
[ "$R_settle_acks" = "$N" ] && [ "$R_reserve_acks" = "$N" ] && [ "$records" = 0 ]
