# SPDX-License-Identifier: Apache-2.0
# `override set|del|list` against a URL whose database Redis refuses
# (SELECT fails: an index past `databases`, or an ACL without SELECT):
# the command fails with the reason and writes nothing, rather than
# changing db 0, which no agent of that URL reads.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
start_redis "$RP" --databases 4
cat >"$TMP/p.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 50ms }
rules:
  - { name: tenant, message: rl-request, key: "t:{tenant}", algorithm: fixed-window, limit: 1, window: 1h }
YAML
timeout 10 "$AGENT" override set -f "$TMP/p.yaml" -r "redis://127.0.0.1:$RP/9" \
	tenant tenant=acme --deny >"$TMP/o1" 2>"$TMP/e1"
expect_eq "$?" 1 "override set exits 1 when SELECT 9 fails ($(cat "$TMP/o1" "$TMP/e1"))"
grep -q "SELECT\|DB index" "$TMP/e1"
ok $? "... and says why ($(cat "$TMP/e1"))"
expect_eq "$(rc "$RP" -n 0 exists 'rl:{overrides}')" 0 "... and wrote nothing into db 0"
rc "$RP" -n 0 hset 'rl:{overrides}' gen 1 >/dev/null
timeout 10 "$AGENT" override list -f "$TMP/p.yaml" -r "redis://127.0.0.1:$RP/9" >"$TMP/o2" 2>"$TMP/e2"
expect_eq "$?" 1 "override list exits 1 too ($(cat "$TMP/e2"))"
timeout 10 "$AGENT" override set -f "$TMP/p.yaml" -r "redis://127.0.0.1:$RP/3" \
	tenant tenant=acme --deny >/dev/null 2>"$TMP/e3"
expect_eq "$?" 0 "a database that exists still works ($(cat "$TMP/e3"))"
expect_eq "$(rc "$RP" -n 3 hexists 'rl:{overrides}' 'o:rl:{tenant:t:acme}')" 1 "... written into db 3"
finish
