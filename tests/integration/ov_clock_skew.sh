#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# An override's end is written in Redis' clock (the set script's TIME),
# and an agent compared it with its own: the host's wall clock, read at
# start. An agent whose host ran ahead of Redis' host took a ban for
# already over and never applied it; one behind kept a ban past its end
# by the difference. Now each worker moves its clock onto Redis' with the
# time every decision script reports (and, before the first, with TIME at
# each link's set-up), so a ban lasts its --ttl on every agent of the
# pool, whatever the hosts' clocks.
#
# Two agents on one Redis under libfaketime (the wall clock only: the
# monotonic clock, which paces everything else, is the host's): one 600 s
# ahead, one 600 s behind.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); BP=$(port 3); CP=$(port 4)
FAKELIB=$(ls /usr/lib/*/faketime/libfaketimeMT.so.1 2>/dev/null | head -1)
SKEW_S=600
[ -n "$FAKELIB" ] || { ok 1 "libfaketime is installed (package faketime, scripts/deps.sh)"; finish; }

# skewed_agent PORT OFFSET: an agent on PORT whose wall clock is OFFSET
# ("+600", "-600") seconds off; AGENT_PID is left to the last one started.
skewed_agent() {
	policy_top "$1" "redis://127.0.0.1:$RP/0" 100ms 1 >"$TMP/p$1.yaml"
	cat >>"$TMP/p$1.yaml" <<YAML
processing_timeout: 1s
rules:
  - { name: tenant, message: rl-request, key: "t:{tenant}", algorithm: fixed-window, limit: 1000, window: 1h }
YAML
	printf '#!/bin/sh\nLD_PRELOAD=%s FAKETIME=%s FAKETIME_DONT_FAKE_MONOTONIC=1 exec %s "$@"\n' \
		"$FAKELIB" "$2" "$AGENT" >"$TMP/agent$1"
	chmod +x "$TMP/agent$1"
	AGENT="$TMP/agent$1" AGENT_LOG="$TMP/agent$1.log" agent_up "$TMP/p$1.yaml"
}
start_redis "$RP"
skewed_agent "$AP" "+$SKEW_S" || { ok 1 "the agent ahead starts"; finish; }
skewed_agent "$BP" "-$SKEW_S" || { ok 1 "the agent behind starts"; finish; }
ov() { timeout 10 "$AGENT" override "$@" -f "$TMP/p$AP.yaml" >/dev/null 2>&1; }
ack() { "$TOOLS/spop-client" -a "127.0.0.1:$1" rl-request "tenant=s:$2"; }
st() { ack "$1" "$2" | field status; }
denied() { [ "$(st "$1" "$2")" = 429 ]; }
passes() { [ "$(st "$1" "$2")" = 0 ]; }

# the faked clocks are real: each agent's first log line against Redis'
ts_of() { sed -n '1s/^ts=\([^ ]*\).*/\1/p' "$TMP/agent$1.log"; }
redis_s=$(rc "$RP" time | head -1)
a_s=$(date -d "$(ts_of "$AP")" +%s); b_s=$(date -d "$(ts_of "$BP")" +%s)
[ $((a_s - redis_s)) -gt $((SKEW_S - 60)) ]; ok $? "the first agent's clock runs ahead of Redis' ($((a_s - redis_s)) s)"
[ $((redis_s - b_s)) -gt $((SKEW_S - 60)) ]; ok $? "the second one's runs behind ($((redis_s - b_s)) s)"

# a decision each: the script's reply brings Redis' time
expect_eq "$(st "$AP" warm) $(st "$BP" warm)" "0 0" "each agent decides through Redis"

ov set tenant tenant=a --deny --ttl 5m
ok $? "override set: a 5 minute ban on tenant a"
until_ok 40 denied "$AP" a; ok $? "the agent ahead applies it (it was over by its clock)"
ra=$(ack "$AP" a | field retry_after)
[ "${ra:-0}" -gt 290 ] && [ "$ra" -le 300 ]; ok $? "... with the ban's own Retry-After ($ra s, of 300)"
until_ok 40 denied "$BP" a; ok $? "the agent behind applies it"

# a third agent ahead, started with the ban set: no decision script has
# answered it yet; its links' set-up (TIME) brings Redis' clock
skewed_agent "$CP" "+$SKEW_S" || { ok 1 "a third agent (ahead) starts"; finish; }
sleep 1.2	# two override polls (OVCACHE_POLL_S 0.5): the ban is loaded
expect_eq "$(st "$CP" a)" 429 "a fresh agent ahead refuses tenant a from its first request"

ov set tenant tenant=b --deny --ttl 2s
ok $? "override set: a 2 s ban on tenant b"
until_ok 40 denied "$BP" b; ok $? "the agent behind applies it"
rb=$(ack "$BP" b | field retry_after)
[ "${rb:-99}" -le 2 ]; ok $? "... with the ban's own Retry-After ($rb s, of 2)"
t0=$(now_ms)
until_ok 60 passes "$BP" b; ok $? "... and ends it when Redis' clock says, not $SKEW_S s later ($(($(now_ms) - t0)) ms after it applied)"
passes "$AP" b; ok $? "the agent ahead has ended it too"
finish
