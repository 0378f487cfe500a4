#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A reservation Redis took for a request the agent then refused is given
# back by the agent: HAProxy sends no rl-response for a refused request,
# so nothing else would ever settle it, and the units stayed charged for
# the whole lease (1h here) although the request was denied ("a request
# denied by one rule is not charged to the others"; the concurrency
# leases of such requests are already released, lease_late.sh):
#   1. fail: closed, Redis late (SIGSTOP past redis.timeout): 503, yet
#      the script runs once Redis resumes and holds the 300;
#   2. a store: local veto after Redis granted: two requests pass the
#      local peek while Redis is stopped, Redis reserves for both, the
#      local tier then refuses the second (429): only the winner's 300
#      stay held.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); MP=$(port 3)
redis_agent_up 1 1s <<YAML || { ok 1 "the agent starts"; finish; }
processing_timeout: 3s
metrics: { listen: 127.0.0.1:$MP }
rules:
  - name: rc
    message: rl-rc
    key: "t:{tenant}"
    algorithm: gcra
    rate: 1000/d
    burst: 1000
    reserve: "{max_tokens}"
    cost: "{cost}"
    lease: 1h
    result_message: rl-rc-res
    fail: closed
  - name: lv
    message: rl-lv
    key: "t:{tenant}"
    algorithm: gcra
    rate: 1000/d
    burst: 1000
    reserve: "{max_tokens}"
    cost: "{cost}"
    lease: 1h
    result_message: rl-lv-res
    fail: open
  - name: lvl
    message: rl-lv
    key: "l:{tenant}"
    algorithm: fixed-window
    limit: 1
    window: 1h
    store: local
YAML
pid=$(eval echo "\$REDIS_PID_$RP")
c() { timeout 10 "$CLIENT" -t 5000 -a "127.0.0.1:$AP" "$@" | grep '^ack'; }
# left RULE: the units Redis says RULE has left for tenant a (key show:
# a read-only peek)
left() { "$AGENT" key show -f "$TMP/policy.yaml" "$1" tenant=a 2>/dev/null |
	sed -n 's/^remaining: *\([0-9]*\).*/\1/p'; }
is_left() { [ "$(left "$1")" = "$2" ]; }

# 1. fail: closed, Redis late
kill -STOP "$pid"
(sleep 1.3; kill -CONT "$pid") &
resume=$!
st=$(c rl-rc tenant=s:a id=s:c1 max_tokens=s:300 | field status)
wait "$resume"
expect_eq "$st" 503 "fail: closed, Redis late: refused"
until_ok 20 is_left rc 1000
ok $? "fail: closed, Redis late: the refused request holds nothing (left $(left rc), want 1000)"
expect_eq "$(rc "$RP" exists "rl:{rc:t:a}:r:c1")" 0 \
	"fail: closed, Redis late: no reservation record is left to lapse"

# 2. a store: local veto after Redis granted
kill -STOP "$pid"
c rl-lv tenant=s:a id=s:v1 max_tokens=s:300 >"$TMP/v1" &
c1=$!
c rl-lv tenant=s:a id=s:v2 max_tokens=s:300 >"$TMP/v2" &
c2=$!
sleep 0.4
kill -CONT "$pid"
wait "$c1" "$c2"
st=$(cat "$TMP/v1" "$TMP/v2" | field status | sort | tr '\n' ' ')
expect_eq "$st" "0 429 " "local veto after Redis: one allowed, one refused"
lost=v2; grep -q ' status=0 ' "$TMP/v2" && lost=v1
until_ok 20 is_left lv 700
ok $? "local veto after Redis: only the allowed request holds its 300 (left $(left lv), want 700)"
expect_eq "$(rc "$RP" exists "rl:{lv:t:a}:r:$lost")" 0 \
	"local veto after Redis: the refused request's record is gone"
finish
