# SPDX-License-Identifier: Apache-2.0
# The agent on redis+cluster://: three masters with --cluster-enabled on
# loopback (no replicas). Limits are exact over many tenants spread across
# slots and under concurrent clients on one key; a request whose rules hash
# to different slots and is denied in one is charged in none (refunds, for
# gcra, fixed-window, sliding-window, token-bucket and sliding-log);
# a slot migration gives ASK and then MOVED, which the agent follows with
# decisions unchanged (gcra, and the window algorithms, whose windows move
# with their key).
. "$(dirname "$0")/../lib.sh"
P1=$(port 1); P2=$(port 2); P3=$(port 3); AP=$(port 4)
rcc() { redis-cli -c -h 127.0.0.1 -p "$P1" "$@" 2>/dev/null; }

cluster3_up "$P1" "$P2" "$P3"

cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 2
redis: { url: "redis+cluster://127.0.0.1:$P1,127.0.0.1:$P2", timeout: 200ms }
processing_timeout: 1s
rules:
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    rate: 1/min
    burst: 5
    fail: open
  - name: hot
    message: rl-hot
    key: "hot:{tenant}"
    algorithm: gcra
    rate: 1/min
    burst: 50
    fail: open
  - name: mt
    message: rl-multi
    key: "t:{tenant}"
    algorithm: gcra
    rate: 1/min
    burst: 10
    fail: open
  - name: mfw
    message: rl-multi
    key: "fw:{tenant}"
    algorithm: fixed-window
    limit: 100
    window: 1h
    fail: open
  - name: mlog
    message: rl-multi
    key: "log:{tenant}"
    algorithm: sliding-log
    limit: 100
    window: 1h
    fail: open
  - name: msw
    message: rl-multi
    key: "sw:{tenant}"
    algorithm: sliding-window
    limit: 100
    window: 1h
    fail: open
  - name: mtb
    message: rl-multi
    key: "tb:{tenant}"
    algorithm: token-bucket
    rate: 1/min
    burst: 10
    fail: open
  - name: wfw
    message: rl-wfw
    key: "wfw:{tenant}"
    algorithm: fixed-window
    limit: 3
    window: 1h
    fail: open
  - name: wsw
    message: rl-wsw
    key: "wsw:{tenant}"
    algorithm: sliding-window
    limit: 3
    window: 1h
    fail: open
  - name: mip
    message: rl-multi
    key: "ip:{ip}"
    algorithm: gcra
    rate: 1/min
    burst: 2
    fail: open
YAML
agent_up "$TMP/policy.yaml"
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@"; }
healthy() { [ "$(c rl-request tenant=s:probe | field degraded)" = 0 ]; }
until_ok 100 healthy; ok $? "decisions come from the cluster"

# 1. many tenants, spread over the slots (and the three nodes), in parallel
cpids=""
for t in $(seq 1 40); do
	c -n 7 rl-request tenant=s:"tn$t" >"$TMP/tn$t.out" 2>&1 &
	cpids="$cpids $!"
done
wait $cpids
bad=0; slots=""
for t in $(seq 1 40); do
	s=$(field status <"$TMP/tn$t.out" | tr '\n' ' ')
	[ "$s" = "0 0 0 0 0 429 429 " ] || { bad=$((bad + 1)); echo "# tn$t: $s"; }
	slots="$slots $(rcc cluster keyslot "rl:{tenant:tenant:tn$t}")"
done
expect_eq "$bad" 0 "40 tenants at once: each gets exactly its burst of 5"
nodes=$(for s in $slots; do
	if [ "$s" -le 5460 ]; then echo a; elif [ "$s" -le 10922 ]; then echo b; else echo c; fi
done | sort -u | wc -l)
expect_eq "$nodes" 3 "the tenants' keys live on all three masters"
expect_eq "$(rcc exists 'rl:{tenant:tenant:tn7}')" 1 "a tenant key is in the cluster"
fcalls=0
for p in "$P1" "$P2" "$P3"; do
	n=$(rc "$p" info commandstats | tr -d '\r' | awk -F'[=,:]' '$1 == "cmdstat_fcall" { print $3 }')
	[ "${n:-0}" -ge 1 ] && fcalls=$((fcalls + 1))
done
expect_eq "$fcalls" 3 "every master was called with FCALL (each loaded the library)"

# 2. exact count: 5 clients x 20 requests on one key, burst 50
cpids=""
for i in 1 2 3 4 5; do
	c -n 20 -P 4 rl-hot tenant=s:hot >"$TMP/hot$i.out" 2>&1 &
	cpids="$cpids $!"
done
wait $cpids
allowed=$(cat "$TMP"/hot?.out | grep -c ' status=0 ')
acks=$(cat "$TMP"/hot?.out | grep -c '^ack')
expect_eq "$acks" 100 "every one of 100 concurrent requests is answered"
expect_eq "$allowed" 50 "exactly the burst (50) is allowed across 5 concurrent clients"
expect_eq "$(cat "$TMP"/hot?.out | grep -c 'degraded=1')" 0 "none of them was degraded"

# 3. rules in different slots: a denial in one slot charges none of the others
ks() { rcc cluster keyslot "$1"; }
s_mt=$(ks 'rl:{mt:t:acme}'); s_fw=$(ks 'rl:{mfw:fw:acme}')
s_log=$(ks 'rl:{mlog:log:acme}'); s_ip=$(ks 'rl:{mip:ip:10.0.0.1}')
s_sw=$(ks 'rl:{msw:sw:acme}'); s_tb=$(ks 'rl:{mtb:tb:acme}')
[ "$(printf '%s\n' "$s_mt" "$s_fw" "$s_log" "$s_ip" "$s_sw" "$s_tb" | sort -u | wc -l)" = 6 ]
ok $? "the six rules of rl-multi hash to six slots ($s_mt $s_fw $s_log $s_ip $s_sw $s_tb)"
out=$(c -n 2 rl-multi tenant=s:acme ip=4:10.0.0.1)
expect_eq "$(echo "$out" | field status | tr '\n' ' ')" "0 0 " "two multi-slot requests pass"
win=$(( $(date +%s) / 3600 ))
# a window counter, this hour's and the last (the test may cross the hour)
# (fields of the rule key's hash)
wc_of() { echo $(( $(rcc hget "$1" "$win" || echo 0) + 0 + $(rcc hget "$1" "$((win - 1))" || echo 0) + 0 )); }
fw() { wc_of 'rl:{mfw:fw:acme}'; }
sw() { wc_of 'rl:{msw:sw:acme}'; }
# whole tokens left (the field t is in millionths; at 1/min the refill
# during the test is under 0.02 of a token)
tb() { echo $(( $(rcc hget 'rl:{mtb:tb:acme}' t || echo 0) / 1000000 )); }
tat0=$(rcc get 'rl:{mt:t:acme}')
expect_eq "$(fw)/$(rcc zcard 'rl:{mlog:log:acme}')/$(sw)/$(tb)" "2/2/2/8" "both were charged in every slot"
out=$(c -n 3 rl-multi tenant=s:acme ip=4:10.0.0.1)
expect_eq "$(echo "$out" | field status | tr '\n' ' ')" "429 429 429 " "the ip rule (burst 2) denies the next ones"
expect_eq "$(echo "$out" | field policy | sort -u)" "mip" "the denying rule is mip"
expect_eq "$(fw)" 2 "fixed-window: the denied requests were refunded"
expect_eq "$(rcc zcard 'rl:{mlog:log:acme}')" 2 "sliding-log: the denied requests were refunded"
expect_eq "$(rcc get 'rl:{mt:t:acme}')" "$tat0" "gcra: the TAT is back where it was"
expect_eq "$(sw)" 2 "sliding-window: the denied requests were refunded"
expect_eq "$(tb)" 8 "token-bucket: the denied requests were refunded (8 of 10 tokens left)"
out=$(c rl-multi tenant=s:acme ip=4:10.0.0.2)
expect_eq "$(echo "$out" | field status)" 0 "another ip for the same tenant passes"
expect_eq "$(fw)/$(rcc zcard 'rl:{mlog:log:acme}')/$(sw)/$(tb)" "3/3/3/7" "and is charged once"
! grep -q 'redis_refund_lost' "$TMP/agent.log"; ok $? "no refund was lost"

# 4. slot migration: ASK while MIGRATING/IMPORTING, then MOVED
owner() {
	for p in "$P1" "$P2" "$P3"; do
		[ "$(rc "$p" cluster myid)" = "$1" ] && echo "$p"
	done
}
# migration_ends KEY: sets S (its slot), SRC and src_id (the master
# serving it), DST and dst_id (another master).
migration_ends() {
	S=$(ks "$1")
	src_id=$(rc "$P1" cluster nodes | awk -v s="$S" '$3 ~ /master/ {
		for (i = 9; i <= NF; i++) { split($i, r, "-"); if (r[2] == "") r[2] = r[1];
			if (s >= r[1] && s <= r[2]) print $1 } }')
	SRC=$(owner "$src_id")
	for p in "$P1" "$P2" "$P3"; do [ "$p" != "$SRC" ] && DST=$p && break; done
	dst_id=$(rc "$DST" cluster myid)
}
K='rl:{tenant:tenant:mig}'
migration_ends "$K"
out=$(c -n 2 rl-request tenant=s:mig)
expect_eq "$(echo "$out" | field status | tr '\n' ' ')" "0 0 " "two requests on the key before the migration"
asks0=$(asking_calls "$DST")
rc "$DST" cluster setslot "$S" importing "$src_id" >/dev/null
rc "$SRC" cluster setslot "$S" migrating "$dst_id" >/dev/null
expect_eq "$(rc "$SRC" migrate 127.0.0.1 "$DST" "$K" 0 5000)" "OK" "MIGRATE moves the key to the importing node"
out=$(c -n 2 rl-request tenant=s:mig)
expect_eq "$(echo "$out" | field status | tr '\n' ' ')/$(echo "$out" | field degraded | tr '\n' ' ')" \
	"0 0 /0 0 " "during the migration (ASK) the count goes on, not degraded"
asks1=$(asking_calls "$DST")
[ "$asks1" -gt "$asks0" ]; ok $? "the agent sent ASKING to the importing node"
for p in "$P1" "$P2" "$P3"; do rc "$p" cluster setslot "$S" node "$dst_id" >/dev/null; done
out=$(c -n 3 rl-request tenant=s:mig)
expect_eq "$(echo "$out" | field status | tr '\n' ' ')/$(echo "$out" | field degraded | tr '\n' ' ')" \
	"0 429 429 /0 0 0 " "after the slot moved (MOVED) the limit holds: 5 in all"
expect_eq "$(rc "$DST" exists "$K")" 1 "the key is on its new node"
! grep -q "redis_error" "$TMP/agent.log"; ok $? "no Redis error reached a decision (redirects were followed)"
other=$(c rl-request tenant=s:tn1 | field status)
expect_eq "$other" 429 "keys on other slots are unaffected"
# The window algorithms keep their windows in the declared key (a hash), so
# they move with it: the count goes on through ASK, and MIGRATE finds no
# key of the same name already made on the importing node (BUSYKEY).
for rule in wfw wsw; do
	K="rl:{$rule:$rule:mig}"
	migration_ends "$K"
	out=$(c -n 2 "rl-$rule" tenant=s:mig | field status | tr '\n' ' ')
	rc "$DST" cluster setslot "$S" importing "$src_id" >/dev/null
	rc "$SRC" cluster setslot "$S" migrating "$dst_id" >/dev/null
	d=$(c -n 2 "rl-$rule" tenant=s:mig)
	out="$out/$(echo "$d" | field status | tr '\n' ' ')/$(echo "$d" | field degraded | tr '\n' ' ')"
	expect_eq "$out" "0 0 /0 429 /0 0 " "$rule: limit 3 holds while the slot is migrating (ASK)"
	expect_eq "$(rc "$SRC" migrate 127.0.0.1 "$DST" "$K" 0 5000)" "OK" "$rule: MIGRATE moves its key (no BUSYKEY)"
	for p in "$P1" "$P2" "$P3"; do rc "$p" cluster setslot "$S" node "$dst_id" >/dev/null; done
	expect_eq "$(c "rl-$rule" tenant=s:mig | field status)" 429 "$rule: after the move the count is still 3"
done
# 5. a master dies: its slots get their fail mode at once, the others go on
# port_of KEY: the port of the master serving KEY's slot
port_of() {
	id=$(rc "$P1" cluster nodes | awk -v s="$(ks "$1")" '$3 ~ /master/ {
		for (i = 9; i <= NF; i++) { split($i, r, "-"); if (r[2] == "") r[2] = r[1];
			if (s >= r[1] && s <= r[2]) print $1 } }')
	owner "$id"
}
dead=""; live=""
for t in $(seq 1 60); do
	p=$(port_of "rl:{tenant:tenant:dz$t}")
	if [ -z "$dead" ] && [ "$p" != "$DST" ]; then dead=$p; dkey=dz$t; fi
	if [ -z "$live" ] && [ "$p" = "$DST" ]; then live=dz$t; fi
done
[ -n "$dead" ] && [ -n "$live" ]; ok $? "a victim node ($dead, key $dkey) and a key on another node ($live)"
dpid=$(eval echo "\$CPID_$dead")
kill -9 "$dpid"; wait "$dpid" 2>/dev/null
t0=$(date +%s%3N)
out=$(c -n 5 rl-request tenant=s:$dkey)
t1=$(date +%s%3N)
expect_eq "$(echo "$out" | field status | sort -u)/$(echo "$out" | field degraded | sort -u)" "0/1" \
	"a key on the dead node: fail open, degraded"
[ $((t1 - t0)) -lt 2000 ]; ok $? "five ACKs for the dead node's key within 2 s ($((t1 - t0)) ms)"
out=$(c rl-request tenant=s:$live)
expect_eq "$(echo "$out" | field status)/$(echo "$out" | field degraded)" "0/0" \
	"a key on a live node is still decided by Redis"
kill -0 "$AGENT_PID"; ok $? "the agent is still running"
finish
