# SPDX-License-Identifier: Apache-2.0
# `key show` is a read: it must change nothing in Redis. A GCRA value is
# "<tat>.0<ei>", and a check under another rate rescales it and writes it
# back (21a2221); the show runs the decision script's PEEK, so a show
# with a policy file of another rate than the agents' rewrote the key at
# its own rate (and its TTL), and a show with a rule of another algorithm
# (token-bucket) met WRONGTYPE and deleted the agents' state. The show now
# sends the PEEK as a view: rescaled in the answer, never written; a key
# of another type is an error, left as it is.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
redis_agent_up 1 200ms <<YAML
processing_timeout: 1s
rules:
  - { name: tenant, message: rl-request, key: "t:{tenant}", algorithm: gcra, rate: 6/min, burst: 5, fail: open }
YAML
K='rl:{tenant:t:acme}'
st=$(timeout 5 "$CLIENT" -a "127.0.0.1:$AP" -n 3 rl-request tenant=s:acme | field status | tr '\n' ' ')
expect_eq "$st" "0 0 0 " "the agents charge acme 3 units at 6/min"
v0=$(rc "$RP" get "$K")
case $v0 in *.010000000) ok 0 "the key holds a TAT at 10 s a unit ($v0)" ;;
*) ok 1 "the key holds a TAT at 10 s a unit (got '$v0')" ;; esac

# show RULE-LINE: key show acme with a policy whose rule is RULE-LINE
show() {
	policy_top "$AP" "redis://127.0.0.1:$RP/0" 200ms 1 >"$TMP/op.yaml"
	printf 'processing_timeout: 1s\nrules:\n  - %s\n' "$1" >>"$TMP/op.yaml"
	timeout 10 "$AGENT" key show --json -f "$TMP/op.yaml" tenant tenant=acme >"$TMP/show.json" 2>"$TMP/show.err"
}
show '{ name: tenant, message: rl-request, key: "t:{tenant}", algorithm: gcra, rate: 600/min, burst: 5 }'
ok $? "key show with a policy at 600/min ($(head -c 200 "$TMP/show.json"))"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not (d["limit"]==5 and d["allowed"] is True))' "$TMP/show.json"
ok $? "... answers for its own rate (limit 5, the next request passes)"
expect_eq "$(rc "$RP" get "$K")" "$v0" "the key is not rewritten at the show's rate"

show '{ name: tenant, message: rl-request, key: "t:{tenant}", algorithm: token-bucket, rate: 6/min, burst: 5 }'
expect_eq "$?" 1 "key show with the rule as a token bucket fails"
grep -q 'another algorithm' "$TMP/show.err"; ok $? "... saying why ($(head -c 200 "$TMP/show.err"))"
expect_eq "$(rc "$RP" get "$K")" "$v0" "the agents' GCRA state is not deleted"

st=$(timeout 5 "$CLIENT" -a "127.0.0.1:$AP" -n 3 rl-request tenant=s:acme | field status | tr '\n' ' ')
expect_eq "$st" "0 0 429 " "the agents still count the 3 units spent: 2 more pass"
finish
