# SPDX-License-Identifier: Apache-2.0
# `key show` of a key with an --allow override: the agents pass every
# request of it (allowed) and charge nothing, so what the key holds is
# what it held before the override, and holds again when it ends. show
# says that, not a full budget the key does not have.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
redis_agent_up 1 100ms <<YAML
processing_timeout: 1s
rules:
  - { name: tenant, message: rl-request, key: "t:{tenant}", algorithm: fixed-window, limit: 3, window: 1h }
YAML
st=$(timeout 5 "$CLIENT" -a "127.0.0.1:$AP" -n 4 rl-request tenant=s:acme | field status | tr '\n' ' ')
expect_eq "$st" "0 0 0 429 " "acme spends its 3"
timeout 10 "$AGENT" override set -f "$TMP/policy.yaml" tenant tenant=acme --allow >/dev/null
ok $? "override: acme is allowed"
sleep 1.2
expect_eq "$(timeout 5 "$CLIENT" -a "127.0.0.1:$AP" rl-request tenant=s:acme | field status)" 0 \
	"the agents pass acme"
timeout 10 "$AGENT" key show --json -f "$TMP/policy.yaml" tenant tenant=acme >"$TMP/a.json"
echo "# key show acme: $(cat "$TMP/a.json")"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["override"], d["allowed"], d["remaining"], d["retry_after_ms"], d["reset_ms"] > 0)' "$TMP/a.json" >"$TMP/got" 2>&1
expect_eq "$(cat "$TMP/got")" "allow True 0 0 True" \
	"key show: allowed by the override, and the 0 the key holds (not 3)"
timeout 10 "$AGENT" key show -f "$TMP/policy.yaml" tenant tenant=acme >"$TMP/a.txt"
grep -q '^remaining:   0 (the allow override passes every request' "$TMP/a.txt"
ok $? "... and in text ($(grep remaining "$TMP/a.txt"))"
timeout 10 "$AGENT" override del -f "$TMP/policy.yaml" tenant tenant=acme >/dev/null
sleep 1.2
expect_eq "$(timeout 5 "$CLIENT" -a "127.0.0.1:$AP" rl-request tenant=s:acme | field status)" 429 \
	"... as the override's end shows: denied"
finish
