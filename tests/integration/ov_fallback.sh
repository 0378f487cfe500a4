# SPDX-License-Identifier: Apache-2.0
# a rule whose key falls back to another template (missing:
# "ip:{ip}") charges clients without the first arg by the fallback key;
# `key show|reset` take its args, `override set` must too, or such a
# client cannot be banned nor raised.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
redis_agent_up 1 100ms <<YAML
processing_timeout: 1s
rules:
  - { name: api, message: rl-request, key: "t:{tenant}", missing: "ip:{ip}", algorithm: fixed-window, limit: 100, window: 1h }
YAML
expect_eq "$(timeout 5 "$CLIENT" -a "127.0.0.1:$AP" rl-request ip=s:203.0.113.9 | field status)" 0 \
	"a client without tenant is charged by its ip"
timeout 10 "$AGENT" key show -f "$TMP/policy.yaml" api ip=203.0.113.9 >"$TMP/s" 2>&1
ok $? "key show takes the fallback's arg ($(grep '^key:' "$TMP/s"))"
timeout 10 "$AGENT" override set -f "$TMP/policy.yaml" api ip=203.0.113.9 --deny >"$TMP/o" 2>&1
expect_eq "$?" 0 "override set takes it too ($(cat "$TMP/o"))"
sleep 1.2
expect_eq "$(timeout 5 "$CLIENT" -a "127.0.0.1:$AP" rl-request ip=s:203.0.113.9 | field status)" 429 \
	"... and the ban applies to that client"
finish
