#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# shadow_deny lines are bounded per rule, not only per key: a shadow rule
# keyed on what the client chooses (a user name, a tenant) logged one
# line for each new key it would deny, so a client sending fresh names
# got one line per request or two, at the default level, however the
# rule was configured: a log flood (and, under journald's rate limit,
# the agent's real errors pushed out). Now a rule logs at most
# SHADOW_LOG_LINES (10) such lines per 10 s across the workers, and its
# next line says how many it left out (suppressed=N). The decisions
# counter still counts every would-be denial.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); MP=$(port 3)
redis_agent_up 2 50ms -m "127.0.0.1:$MP" <<YAML
rules:
  - { name: sh, message: rl-login, key: "user:{user}", algorithm: sliding-window, limit: 1, window: 1m, shadow: true }
YAML
ok $? "agent up"
# 300 distinct users, each twice: every second request would be denied
for _ in 1 2; do
	"$CLIENT" -a "127.0.0.1:$AP" -n 300 -P 20 -u rl-login user=s:u >"$TMP/out"
	expect_eq "$(grep -c '^ack.* status=0 ' "$TMP/out")" 300 "300 requests allowed (shadow)"
done
expect_eq "$(metric "$MP" 'spoa_rl_decisions_total{rule="sh",outcome="shadow_denied"}')" 300 \
	"300 would-be denials counted"
lines=$(grep -c 'msg=shadow_deny rule=sh ' "$TMP/agent.log")
[ "$lines" -ge 1 ] && [ "$lines" -le 10 ]
ok $? "at most 10 shadow_deny lines for 300 new keys denied ($lines)"
# The next window's first line carries the count of those left out.
sleep 10.2
"$CLIENT" -a "127.0.0.1:$AP" -n 2 rl-login user=s:late >/dev/null
until_ok 20 grep -q 'msg=shadow_deny rule=sh key="rl:{sh:user:late}"' "$TMP/agent.log"
ok $? "a denial in the next window is logged"
expect_eq "$(grep 'msg=shadow_deny rule=sh key="rl:{sh:user:late}"' "$TMP/agent.log" | field suppressed)" \
	$((300 - lines)) "with the lines left out before it (suppressed=N)"
finish
