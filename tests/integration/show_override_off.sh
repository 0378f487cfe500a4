#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# `key show` says what the agents apply. With `overrides: false` the agents
# never read rl:{overrides} (no table, no poll): an entry there, left from
# before or set by mistake, changes no decision, so key show must not
# apply it either.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
redis_agent_up 1 100ms <<YAML
overrides: false
processing_timeout: 1s
rules:
  - { name: tenant, message: rl-request, key: "t:{tenant}", algorithm: fixed-window, limit: 3, window: 1h }
YAML
timeout 10 "$AGENT" override set -f "$TMP/policy.yaml" tenant tenant=mallory --deny >/dev/null
ok $? "an override entry for mallory is in Redis"
sleep 1.2
expect_eq "$(timeout 5 "$CLIENT" -a "127.0.0.1:$AP" rl-request tenant=s:mallory | field status)" 0 \
	"the agents ignore it (overrides: false): mallory's request passes"
timeout 10 "$AGENT" key show --json -f "$TMP/policy.yaml" tenant tenant=mallory >"$TMP/m.json"
echo "# key show mallory: $(cat "$TMP/m.json")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not (d["allowed"] is True and d["override"] is None))' "$TMP/m.json"
ok $? "key show mallory: allowed, no override (as the agents decide)"
finish
