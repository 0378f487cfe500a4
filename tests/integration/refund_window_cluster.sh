#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A refund on redis+cluster:// undoes the window field the charge went to,
# even when a window boundary passed between the agent's sending the call
# and the script's reading Redis TIME. The agent named the window by a
# TIME it pipelined before each call; a call held up after that TIME (here
# by CLIENT PAUSE WRITE, which answers TIME and holds the script; in
# production a large call read in pieces while other clients' scripts
# run, or a busy node) charged the next window, and the refund decremented
# the previous one's field: the denied request stayed charged in full.
. "$(dirname "$0")/../lib.sh"
P1=$(port 1); P2=$(port 2); P3=$(port 3); AP=$(port 4)
rcc() { redis-cli -c -h 127.0.0.1 -p "$P1" "$@" 2>/dev/null; }

cluster3_up "$P1" "$P2" "$P3"

{
	policy_top "$AP" "redis+cluster://127.0.0.1:$P1,127.0.0.1:$P2" 2s 1
	cat <<YAML
processing_timeout: 3s
rules:
  - name: fw
    message: rl-req
    key: "f:{tenant}"
    algorithm: fixed-window
    limit: 100
    window: 1s
    fail: closed
  - name: sw
    message: rl-req
    key: "s:{tenant}"
    algorithm: sliding-window
    limit: 100
    window: 1s
    fail: closed
  - name: one
    message: rl-req
    key: "u:{user}"
    algorithm: gcra
    rate: 1/d
    burst: 1
    fail: closed
YAML
} >"$TMP/policy.yaml"
agent_up "$TMP/policy.yaml" || { ok 1 "the agent starts"; finish; }
F='rl:{fw:f:acme}'; S='rl:{sw:s:acme}'; U='rl:{one:u:u1}'
distinct_slots "$P1" "$F" "$S" "$U"
ok $? "the three rules' keys are in three slots"
c() { "$CLIENT" -t 5000 -a "127.0.0.1:$AP" "$@" | grep '^ack'; }
now_us() { rcc time | tr -d '\r' | { read -r s; read -r u; echo $((s * 1000000 + 10#$u)); }; }

expect_eq "$(c rl-req tenant=s:other user=s:u1 | field status)" 0 \
	"another tenant's request spends the user's one unit"

# The next request goes out while every node holds scripts for 700 ms
# (TIME still answers), across a window boundary: its calls are sent
# before the boundary and their scripts run after it. Tried again in a
# later second when the paused nodes or the clock read took too long.
held=1
for _ in $(seq 1 10); do
	until f=$(( $(now_us) % 1000000 )); [ "$f" -ge 400000 ] && [ "$f" -lt 700000 ]; do
		sleep 0.02
	done
	tp=$(now_us)
	ppids=""
	for p in "$P1" "$P2" "$P3"; do
		rc "$p" client pause 700 write >/dev/null &
		ppids="$ppids $!"
	done
	wait $ppids
	t0=$(now_us)
	# the boundary after t0 comes before the first pause ends
	[ $((t0 / 1000000)) = $((tp / 1000000)) ] &&
		[ $(( (t0 / 1000000 + 1) * 1000000 - tp )) -lt 650000 ] &&
		[ $(( (t0 / 1000000 + 1) * 1000000 - t0 )) -gt 50000 ] &&
		{ held=0; break; }
	sleep 1
done
ok "$held" "the nodes hold scripts from before a window boundary to after it"
out=$(c rl-req tenant=s:acme user=s:u1)
t1=$(now_us)
expect_eq "$(echo "$out" | field status)/$(echo "$out" | field policy)" "429/one" \
	"the request is denied by the user's rule, in another slot"
[ $((t1 / 1000000)) -gt $((t0 / 1000000)) ]
ok $? "it was sent before the boundary and answered after it"
w=$((t0 / 1000000 + 1))
expect_eq "$(rcc hget "$F" "$w")" 0 \
	"fixed-window: the refund undoes the window the charge went to"
expect_eq "$(rcc hget "$S" "$w")" 0 \
	"sliding-window: the refund undoes the window the charge went to"
sum() { rcc hvals "$1" | awk '{ s += $1 } END { print s + 0 }'; }
expect_eq "$(sum "$F")/$(sum "$S")" "0/0" "the denied request is charged in no window"
! grep -q 'redis_refund_lost' "$TMP/agent.log"; ok $? "no refund was lost"
finish
