# SPDX-License-Identifier: Apache-2.0
# `key show` "tells what a tenant has left and on which limits"
# (docs/OPERATING.md): for a tenant whose limit an override raised, or
# whom an override bans, it must say what the agents apply.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
redis_agent_up 1 100ms <<YAML
processing_timeout: 1s
rules:
  - { name: tenant, message: rl-request, key: "t:{tenant}", algorithm: fixed-window, limit: 3, window: 1h }
YAML
timeout 10 "$AGENT" override set -f "$TMP/policy.yaml" tenant tenant=acme --limit 6 >/dev/null
ok $? "override: acme may do 6"
timeout 10 "$AGENT" override set -f "$TMP/policy.yaml" tenant tenant=mallory --deny >/dev/null
ok $? "override: mallory is banned"
sleep 1.2
st=$(timeout 5 "$CLIENT" -a "127.0.0.1:$AP" -n 4 rl-request tenant=s:acme | field status | tr '\n' ' ')
expect_eq "$st" "0 0 0 0 " "acme: 4 requests pass (override 6)"
timeout 10 "$AGENT" key show --json -f "$TMP/policy.yaml" tenant tenant=acme >"$TMP/acme.json"
echo "# key show acme: $(cat "$TMP/acme.json")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not (d["limit"]==6 and d["remaining"]==2 and d["allowed"] is True))' "$TMP/acme.json"
ok $? "key show acme: limit 6, 2 left, the next request passes"
expect_eq "$(timeout 5 "$CLIENT" -a "127.0.0.1:$AP" rl-request tenant=s:acme | field status)" 0 \
	"... and indeed the next request passes"
timeout 10 "$AGENT" key show --json -f "$TMP/policy.yaml" tenant tenant=mallory >"$TMP/m.json"
echo "# key show mallory: $(cat "$TMP/m.json")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not (d["allowed"] is False))' "$TMP/m.json"
ok $? "key show mallory: the next request is denied (banned)"
expect_eq "$(timeout 5 "$CLIENT" -a "127.0.0.1:$AP" rl-request tenant=s:mallory | field status)" 429 \
	"... and indeed it is"
finish
