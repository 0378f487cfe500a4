# SPDX-License-Identifier: Apache-2.0
# An override set on a Redis restarted empty (no persistence, or a
# failover) must reach an agent that held a table from before: the
# table's generation ("gen") started again from 1, so an agent that had
# seen gen 1 before the restart, and polled again only after the next
# `override set`, saw the same gen and kept its old table for good: the
# new ban never applied, the old one never ended (OPERATING.md: "a change
# applies on every agent within 0.5 s plus two round trips").
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
redis_agent_up 1 100ms <<YAML
processing_timeout: 1s
rules:
  - { name: tenant, message: rl-request, key: "t:{tenant}", algorithm: fixed-window, limit: 1000, window: 1h }
YAML
ov() { timeout 10 "$AGENT" override "$@" -f "$TMP/policy.yaml"; }
st() { "$TOOLS/spop-client" -a "127.0.0.1:$AP" rl-request "tenant=s:$1" | field status; }
denied() { [ "$(st "$1")" = 429 ]; }
passes() { [ "$(st "$1")" = 0 ]; }

ov set tenant tenant=old --deny >/dev/null 2>&1
ok $? "override set: a ban on tenant old"
until_ok 20 denied old; ok $? "the agent applies it"
# the agent is away (a partition, a long pause) while Redis restarts
# empty and the operator bans another tenant
kill -STOP "$AGENT_PID"
eval "rpid=\$REDIS_PID_$RP"
kill "$rpid"; wait "$rpid" 2>/dev/null
start_redis "$RP"
ov set tenant tenant=new --deny >/dev/null 2>&1
ok $? "override set on the restarted Redis: a ban on tenant new"
kill -CONT "$AGENT_PID"
until_ok 30 denied new; ok $? "the agent applies the new ban"
until_ok 10 passes old; ok $? "... and drops the one Redis no longer holds"
finish
