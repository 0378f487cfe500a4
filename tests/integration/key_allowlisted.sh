# SPDX-License-Identifier: Apache-2.0
# `key show|reset RULE ip=ADDR` for an address in the rule's allow: list:
# the agents never check that rule for it, so there is no key; the
# command says so, not "missing arg" for the arg it was given.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1)
start_redis "$RP"
cat >"$TMP/p.yaml" <<YAML
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 50ms }
allow_lists:
  office: [10.20.0.0/16]
rules:
  - { name: per-ip, message: rl-request, key: "ip:{ip}", rate: 10/s, allow: [office] }
YAML
for verb in show reset; do
	timeout 10 "$AGENT" key "$verb" -f "$TMP/p.yaml" per-ip ip=10.20.1.2 >/dev/null 2>"$TMP/e"
	expect_eq "$?" 2 "key $verb of an allow-listed address: exit 2"
	grep -q "ip=10.20.1.2 is in rule per-ip's allow: list" "$TMP/e"
	ok $? "... saying why ($(cat "$TMP/e"))"
done
timeout 10 "$AGENT" key show -f "$TMP/p.yaml" per-ip ip=10.21.1.2 >"$TMP/o" 2>&1
ok $? "an address outside the list is shown ($(head -n 2 "$TMP/o" | tr '\n' ' '))"
finish
