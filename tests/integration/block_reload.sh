# SPDX-License-Identifier: Apache-2.0
# A reload that takes block: off a rule lets its blocked keys through as
# soon as Redis does: the worker's near-cache holds a block to its end (up
# to 60 s while the pool's resets are watched), and must not answer the
# rule without block: from it. block: 20s with block_max: 20s once hashed
# like no box at all (block ^ block_max), so the held block kept denying
# the key for its whole 20 s after the reload.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
pol() { # RULE_TAIL: the rest of the rule's flow mapping
	policy_top "$AP" "redis://127.0.0.1:$RP/0" 100ms 1
	echo "processing_timeout: 1s"
	echo "rules:"
	echo "  - { name: ban, message: rl-request, key: \"u:{user}\", rate: 2/s, burst: 2$1 }"
}
statuses() { # N USER: N requests; their statuses
	"$CLIENT" -a "127.0.0.1:$AP" -n "$1" rl-request "user=s:$2" |
		field status | tr '\n' ' '
}
reloads() { grep -c 'msg=reloaded' "$TMP/agent.log"; }

start_redis "$RP"
pol ", block: 20s, block_max: 20s" >"$TMP/policy.yaml"
agent_up "$TMP/policy.yaml"
sleep 1	# the reset poll has answered: blocks are held to their end
expect_eq "$(statuses 3 alice)" "0 0 429 " \
	"the third request of a 2/s burst is the offence: a 20 s block"
expect_eq "$(statuses 1 alice)" "429 " "the key is blocked"
pol "" >"$TMP/policy.yaml"
n=$(reloads)
kill -HUP "$AGENT_PID"
until_ok 50 eval '[ "$(reloads)" -gt "$n" ]'
ok $? "reloaded without block:"
sleep 1.2	# the rate alone lets the key through again by now
expect_eq "$(statuses 1 alice)" "0 " \
	"after the reload the key is decided by its rate, not the held block"
finish
