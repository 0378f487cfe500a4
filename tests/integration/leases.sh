#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Concurrency leases held in process (store: local, and the fail: local
# fallback while Redis is down) are the agent's, not one worker's: HAProxy
# sends a request's release on whichever SPOP connection it picks, so it
# lands on any worker. Each lease used to live in the table of the worker
# that granted it, and a release landing elsewhere was lost: a limit of 1
# refused every request after the first missed release, until the lease
# ran out (10 minutes here).
#   1. store: local, limit 1: acquire and release, each on a new connection
#      (so on any of the 4 workers), 16 times: all allowed;
#   2. the limit is the agent's: 6 held leases, limit 2: exactly 2 allowed
#      (each worker used to allow 2 of its own);
#   3. the same two for a Redis rule's fail: local fallback, Redis down
#      (its share is divided among the pool's agents, not the workers).
. "$(dirname "$0")/../lib.sh"
AP=$(port 1); DEAD=$(port 2)	# nothing listens on DEAD: Redis is down
cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 4
redis: { url: "redis://127.0.0.1:$DEAD/0", timeout: 50ms }
rules:
  - name: one
    message: rl-one
    key: "one:{tenant}"
    algorithm: concurrency
    limit: 1
    lease: 10m
    id: "{id}"
    release: rl-one-done
    store: local
  - name: two
    message: rl-two
    key: "two:{tenant}"
    algorithm: concurrency
    limit: 2
    lease: 10m
    id: "{id}"
    release: rl-two-done
    store: local
  - name: fb
    message: rl-fb
    key: "fb:{tenant}"
    algorithm: concurrency
    limit: 2
    lease: 10m
    id: "{id}"
    release: rl-fb-done
    fail: local
YAML
agent_up "$TMP/policy.yaml"
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@" | grep '^ack' | field status; }

# cycles MSG: 16 acquire + release pairs, each frame on its own connection;
# prints the acquires' statuses
cycles() {
	for n in $(seq 16); do
		c "$1" tenant=s:acme id=s:req$n
		c "$1-done" tenant=s:acme id=s:req$n >/dev/null
	done | tr '\n' ' '
}
# held MSG: 6 acquires never released, each on its own connection
held() {
	for n in $(seq 6); do c "$1" tenant=s:held id=s:h$n; done | tr '\n' ' '
}
all_ok="0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 "

expect_eq "$(cycles rl-one)" "$all_ok" \
	"store: local: every release frees its lease, whichever worker it reaches"
expect_eq "$(held rl-two)" "0 0 429 429 429 429 " \
	"store: local: the limit is the agent's, not each worker's"
out=$("$CLIENT" -a "127.0.0.1:$AP" rl-fb tenant=s:probe id=s:p)
echo "$out" | grep -q 'degraded=1'
ok $? "fail: local: Redis is down, the fallback decides"
"$CLIENT" -a "127.0.0.1:$AP" rl-fb-done tenant=s:probe id=s:p >/dev/null
expect_eq "$(cycles rl-fb)" "$all_ok" \
	"fail: local: every release frees its lease, whichever worker it reaches"
expect_eq "$(held rl-fb)" "0 0 429 429 429 429 " \
	"fail: local: the pool's share (2 over 1 agent) is the agent's, not each worker's"
finish
