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
#      stay held;
#   3. a refused request whose timeout opens the breaker: the agent's
#      release of its lease and its settle at 0, in one call, still reach
#      Redis through the open breaker.
# Each of the agent's own settles at 0 is counted, by rule, in
# spoa_rl_reserve_self_settles_total (they were in no metric at all), and
# none is given up (spoa_rl_reserve_self_settles_lost_total).
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); MP=$(port 3)
{
	echo "processing_timeout: 3s"
	echo "metrics: { listen: 127.0.0.1:$MP }"
	echo "rules:"
	reserve_rule rc rl-rc rl-rc-res closed
	reserve_rule lv rl-lv rl-lv-res open
	reserve_rule bc rl-bc rl-bc-res closed
	cat <<YAML
  - name: bcc
    message: rl-bc
    key: "c:{tenant}"
    algorithm: concurrency
    limit: 5
    lease: 5m
    release: rl-bc-done
    fail: closed
  - name: lvl
    message: rl-lv
    key: "l:{tenant}"
    algorithm: fixed-window
    limit: 1
    window: 1h
    store: local
YAML
} >"$TMP/rules.yaml"
# (not a pipe into redis_agent_up: its Redis and agent would be started in
# a subshell, and the EXIT trap would not know their pids)
redis_agent_up 1 1s <"$TMP/rules.yaml" || { ok 1 "the agent starts"; finish; }
pid=$(eval echo "\$REDIS_PID_$RP")
c() { timeout 10 "$CLIENT" -t 5000 -a "127.0.0.1:$AP" "$@" | grep '^ack'; }
# left RULE: the units Redis says RULE has left for tenant a (key show:
# a read-only peek)
left() { "$AGENT" key show -f "$TMP/policy.yaml" "$1" tenant=a 2>/dev/null |
	sed -n 's/^remaining: *\([0-9]*\).*/\1/p'; }
is_left() { [ "$(left "$1")" = "$2" ]; }
# settled RULE N: the agent counts N settles at 0 of its own for RULE
settled() { [ "$(metric "$MP" "spoa_rl_reserve_self_settles_total{rule=\"$1\"}")" = "$2" ]; }

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
until_ok 10 settled rc 1
ok $? "fail: closed, Redis late: the settle at 0 is counted for rule rc"

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
until_ok 10 settled lv 1
ok $? "local veto after Redis: the settle at 0 is counted for rule lv"

# 3. The breaker opened by the refused request's own timeout (the fifth
# in a row): the agent's release of its lease and its settle at 0 go in
# one call, which goes through the open breaker as releases alone do, and
# both run once Redis resumes, after the late script that took them.
kill -STOP "$pid"
for id in x1 x2 x3 x4; do c rl-rc tenant=s:b id=s:$id max_tokens=s:1 >/dev/null; done
st=$(c rl-bc tenant=s:a id=s:b1 max_tokens=s:300 | field status)
expect_eq "$st" 503 "breaker opening: the fifth late call is refused"
grep -q 'redis_breaker_open' "$TMP/agent.log"
ok $? "five timeouts in a row open the breaker"
kill -CONT "$pid"
leases() { rc "$RP" zrange "rl:{bcc:c:a}" 0 -1 | tr -d '\n'; }
is_free() { [ -z "$(leases)" ] && [ "$(left bc)" = 1000 ]; }
until_ok 10 settled bc 1
ok $? "breaker open: the refused request's settle at 0 is counted for rule bc"
released() { [ "$(metric "$MP" spoa_rl_lease_self_releases_total)" = 1 ]; }
until_ok 10 released
ok $? "breaker open: ... and its lease's release"
until_ok 10 is_free
ok $? "breaker open: the lease and the reservation are given back (leases '$(leases)', left $(left bc))"
until_ok 10 settled rc 5
ok $? "breaker open: the four refusals before it are counted as settled at 0 for rule rc"
expect_eq "$(metric "$MP" spoa_rl_reserve_self_settles_lost_total)" 0 \
	"no settle at 0 was given up"
finish
