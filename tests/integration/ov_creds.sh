# SPDX-License-Identifier: Apache-2.0
# `override set|list|del` against a Redis whose password comes
# from the policy's redis.password_env (docs/OPERATING.md, "Redis
# credentials"), as `key show|reset` and the agent do.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
start_redis "$RP" --requirepass "pw-$$-secret"
export RL_TEST_PW="pw-$$-secret"
cat >"$TMP/p.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms, password_env: RL_TEST_PW }
processing_timeout: 1s
rules:
  - { name: tenant, message: rl-request, key: "t:{tenant}", algorithm: fixed-window, limit: 1, window: 1h }
YAML
agent_up "$TMP/p.yaml"
timeout 10 "$AGENT" key reset -f "$TMP/p.yaml" tenant tenant=acme >/dev/null 2>"$TMP/e1"
expect_eq "$?" 0 "key reset authenticates with password_env ($(cat "$TMP/e1"))"
timeout 10 "$AGENT" override set -f "$TMP/p.yaml" tenant tenant=acme --deny >/dev/null 2>"$TMP/e2"
expect_eq "$?" 0 "override set authenticates with password_env too ($(cat "$TMP/e2"))"
sleep 1.2
expect_eq "$(timeout 5 "$CLIENT" -a "127.0.0.1:$AP" rl-request tenant=s:acme | field status)" 429 \
	"... and the ban applies"
timeout 10 "$AGENT" override list -f "$TMP/p.yaml" >"$TMP/l" 2>"$TMP/e3"
expect_eq "$?" 0 "override list authenticates ($(cat "$TMP/e3"))"
finish
