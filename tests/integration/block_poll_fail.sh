# SPDX-License-Identifier: Apache-2.0
# A worker whose reset poll fails holds its blocks 0.5 s like any denial
# (docs/OPERATING.md, "How a reset reaches every agent"): the blocks it
# held to their end while the poll answered are cut back too, so a `key
# reset` made meanwhile reaches it within 1 s, not at the block's end.
# The poll is made to fail by an ACL that refuses rl:{overrides} to the
# agent's user while its rule keys still work (as a Cluster whose node
# holding that slot is down).
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
start_redis "$RP"
rc "$RP" acl setuser agent on '>agent-pw-123' '~*' '&*' +@all >/dev/null
policy_top "$AP" "redis://agent:agent-pw-123@127.0.0.1:$RP/0" 100ms 1 >"$TMP/p.yaml"
cat >>"$TMP/p.yaml" <<YAML
processing_timeout: 1s
rules:
  - { name: sw, message: rl-sw, key: "s:{user}", algorithm: sliding-window, limit: 1, window: 1h, block: 30s }
YAML
agent_up "$TMP/p.yaml"
sleep 0.6 # the first poll answered: blocks are held to their end
st() { "$CLIENT" -a "127.0.0.1:$AP" rl-sw "user=s:$1" | field status; }
expect_eq "$(st dave) $(st dave)" "0 429" "dave's second request is an offence"
expect_eq "$(st dave)" 429 "... blocked (held by the near-cache)"
# the poll fails from now on; the rule's keys still work
rc "$RP" acl setuser agent resetkeys '~rl:{sw:*' >/dev/null
sleep 1.1
"$AGENT" key reset -f "$TMP/p.yaml" -r "redis://127.0.0.1:$RP/0" sw user=dave >"$TMP/r" 2>&1
ok $? "key reset sw user=dave ($(cat "$TMP/r"))"
sleep 1
expect_eq "$(st dave)" 0 "the reset reaches the worker whose poll fails within 1 s"
finish
