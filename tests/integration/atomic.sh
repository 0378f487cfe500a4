#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Atomicity across agent processes, without HAProxy: one redis-server,
# three agent processes (2 workers each), and many spop-client processes
# released at once by a FIFO barrier, spread over the three agents, all
# on one key. The allowed total must be exactly the rule's allowance:
#   concurrency  limit 20, lease 10m (no release is ever sent)  -> 20
#   gcra         rate 1/hour, burst 40                          -> 40
# Every request must be answered, none degraded (the rules fail closed, so
# a Redis error would show as a 503 and a short count, never as an extra
# allowed), and every agent must have decided some of them.
# (gcra, fixed-window and sliding-log through HAProxy: e2e/global_count.sh.)
. "$(dirname "$0")/../lib.sh"
RP=$(port 1)
CONC_LIMIT=20; CONC_CLIENTS=90		# one NOTIFY each, its own request id
GCRA_BURST=40; GCRA_CLIENTS=45; GCRA_EACH=4	# pipelined on one connection

start_redis "$RP"
ok $? "redis-server up on $RP"
for n in 1 2 3; do
	cat >"$TMP/policy$n.yaml" <<YAML
listen: 127.0.0.1:$(port $((n + 1)))
workers: 2
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 500ms }
processing_timeout: 1s
rules:
  - name: cc
    message: rl-conc
    key: "cc:{tenant}"
    algorithm: concurrency
    limit: $CONC_LIMIT
    lease: 10m
    id: "{id}"
    release: rl-done
    missing: deny
    fail: closed
  - name: g
    message: rl-gcra
    key: "g:{tenant}"
    algorithm: gcra
    rate: 1/hour
    burst: $GCRA_BURST
    missing: deny
    fail: closed
YAML
	AGENT_LOG="$TMP/agent$n.log" start_agent "$TMP/policy$n.yaml"
done
for n in 1 2 3; do
	wait_port "$(port $((n + 1)))"; ok $? "agent $n listening"
done

# fire NAME COUNT ARGS...: COUNT clients, client i on agent i % 3 + 1, each
# blocked on opening the FIFO until all are started, then released at once.
# Client i writes $TMP/NAME.<agent>.<i>; "{i}" in ARGS becomes i.
fire() {
	name=$1; count=$2; shift 2
	fifo="$TMP/go.$name"
	mkfifo "$fifo"
	cpids=""
	for i in $(seq 1 "$count"); do
		a=$((i % 3 + 1))
		args=()
		for x in "$@"; do args+=("${x//\{i\}/$i}"); done
		( : <"$fifo"
		  exec timeout 20 "$CLIENT" -a "127.0.0.1:$(port $((a + 1)))" -t 10000 \
			"${args[@]}" >"$TMP/$name.$a.$i" 2>&1 ) &
		cpids="$cpids $!"
	done
	sleep 0.5		# every client is blocked on the FIFO
	exec 4>"$fifo"; sleep 0.2; exec 4>&-
	for p in $cpids; do wait "$p"; done
}

# statuses NAME [AGENT]: every status= value the clients of NAME got.
statuses() { cat "$TMP/$1".${2:-*}.* | grep '^ack' | field status; }

fire conc "$CONC_CLIENTS" rl-conc tenant=s:race 'id=s:req-{i}'
expect_eq "$(statuses conc | wc -l)" "$CONC_CLIENTS" "concurrency: every request is answered"
expect_eq "$(statuses conc | grep -cx 0)" "$CONC_LIMIT" \
	"concurrency: exactly the limit allowed across 3 agents ($CONC_CLIENTS at once)"
expect_eq "$(statuses conc | grep -cx 429)" "$((CONC_CLIENTS - CONC_LIMIT))" \
	"concurrency: all others are 429"
expect_eq "$(redis-cli -p "$RP" ZCARD 'rl:{cc:cc:race}')" "$CONC_LIMIT" \
	"concurrency: exactly the limit of leases in Redis"

fire gcra "$GCRA_CLIENTS" -n "$GCRA_EACH" -P "$GCRA_EACH" rl-gcra tenant=s:race
total=$((GCRA_CLIENTS * GCRA_EACH))
expect_eq "$(statuses gcra | wc -l)" "$total" "gcra: every request is answered"
expect_eq "$(statuses gcra | grep -cx 0)" "$GCRA_BURST" \
	"gcra: exactly the burst allowed across 3 agents ($total at once)"
expect_eq "$(statuses gcra | grep -cx 429)" "$((total - GCRA_BURST))" "gcra: all others are 429"

expect_eq "$(cat "$TMP"/conc.* "$TMP"/gcra.* | grep '^ack' | grep -c 'degraded=1')" 0 \
	"no decision was degraded"
for a in 1 2 3; do
	n=$(cat "$TMP"/conc."$a".* "$TMP"/gcra."$a".* | grep -c '^ack')
	[ "$n" -gt 0 ]; ok $? "agent $a decided some requests ($n)"
done
finish
