# SPDX-License-Identifier: Apache-2.0
# Runtime overrides (spoa-ratelimit override, override.h) against a real
# redis-server and two agents sharing it:
#   a limit override raises one tenant's limit and leaves its neighbour
#   alone; allow passes a key past the limit; deny answers 429 with a
#   Retry-After counting down to the override's expiry (or 60 s without
#   one); expiry returns to the policy's limit; both agents agree, within
#   the poll interval (0.5 s) and with no script call for allowed or
#   denied keys; del removes; bad input exits 2 with one line; with Redis
#   gone, the fail: local fallback (the C twins) decides under the
#   override's limit too, from the table the agent holds.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP1=$(port 2); AP2=$(port 3)
start_redis "$RP"
policy() {
	cat <<YAML
listen: 127.0.0.1:$1
workers: 2
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms }
processing_timeout: 1s
rules:
  - { name: tenant, message: rl-request, key: "tenant:{tenant}", algorithm: fixed-window, limit: 3, window: 1h }
  - { name: conc, message: rl-conc, key: "c:{tenant}", algorithm: concurrency, limit: 1 }
  - { name: loc, message: rl-loc, key: "l:{tenant}", algorithm: fixed-window, limit: 2, window: 1h, fail: local }
YAML
}
policy "$AP1" >"$TMP/p1.yaml"
policy "$AP2" >"$TMP/p2.yaml"
AGENT_LOG="$TMP/agent1.log" agent_up "$TMP/p1.yaml"
AGENT_LOG="$TMP/agent2.log" agent_up "$TMP/p2.yaml"
ov() { "$AGENT" override "$@" -f "$TMP/p1.yaml"; }
# statuses AGENT_PORT N TENANT: N requests of TENANT; their statuses.
statuses() {
	"$TOOLS/spop-client" -a "127.0.0.1:$1" -n "$2" rl-request "tenant=s:$3" |
		field status | tr '\n' ' '
}

# ---- limit -------------------------------------------------------------
ov set tenant tenant=acme --limit 6 >"$TMP/o" 2>&1
ok $? "override set tenant tenant=acme --limit 6 ($(cat "$TMP/o"))"
sleep 1.2			# > one poll interval
expect_eq "$(statuses "$AP1" 5 acme)" "0 0 0 0 0 " \
	"agent 1: acme passes past the policy's 3 (override: 6)"
expect_eq "$(statuses "$AP2" 2 acme)" "0 429 " \
	"agent 2 shares the override and the count: the 7th request is denied"
expect_eq "$(statuses "$AP1" 4 globex)" "0 0 0 429 " \
	"a neighbour (globex) keeps the policy's limit of 3"

# ---- allow --------------------------------------------------------------
before=$(script_calls "$RP")
ov set tenant tenant=globex --allow >/dev/null 2>&1
ok $? "override set tenant tenant=globex --allow"
sleep 1.2
calls0=$(script_calls "$RP")
expect_eq "$(statuses "$AP1" 5 globex)$(statuses "$AP2" 5 globex)" \
	"0 0 0 0 0 0 0 0 0 0 " "allow: globex passes past the limit on both agents"
expect_eq "$(( $(script_calls "$RP") - calls0 ))" 0 \
	"allow: no script call for the allowed key"

# ---- deny with expiry ---------------------------------------------------
ov set tenant tenant=initech --deny --ttl 30s >/dev/null 2>&1
ok $? "override set tenant tenant=initech --deny --ttl 30s"
sleep 1.2
calls0=$(script_calls "$RP")
"$TOOLS/spop-client" -a "127.0.0.1:$AP1" rl-request tenant=s:initech >"$TMP/d1"
expect_eq "$(field status <"$TMP/d1")" 429 "deny: a fresh key is refused at once"
ra1=$(field retry_after <"$TMP/d1")
[ "$ra1" -ge 27 ] && [ "$ra1" -le 30 ]
ok $? "deny: Retry-After is the time left of the 30 s override ($ra1)"
sleep 2
"$TOOLS/spop-client" -a "127.0.0.1:$AP2" rl-request tenant=s:initech >"$TMP/d2"
expect_eq "$(field status <"$TMP/d2")" 429 "deny: agent 2 refuses too"
ra2=$(field retry_after <"$TMP/d2")
[ "$ra2" -lt "$ra1" ] && [ "$ra2" -ge 25 ]
ok $? "deny: Retry-After counts down ($ra1 then $ra2)"
expect_eq "$(( $(script_calls "$RP") - calls0 ))" 0 \
	"deny: no script call for the denied key"
ov set tenant tenant=hooli --deny >/dev/null 2>&1
sleep 1.2
"$TOOLS/spop-client" -a "127.0.0.1:$AP1" rl-request tenant=s:hooli >"$TMP/d3"
expect_eq "$(field status <"$TMP/d3") $(field retry_after <"$TMP/d3")" \
	"429 3600" "deny without expiry: Retry-After the rule's window (1h)"

# ---- expiry --------------------------------------------------------------
ov set tenant tenant=umbrella --limit 10 --ttl 2s >/dev/null 2>&1
sleep 1.2
expect_eq "$(statuses "$AP1" 4 umbrella)" "0 0 0 0 " \
	"a 2 s override: 4 pass while it holds"
sleep 1.5
expect_eq "$(statuses "$AP2" 1 umbrella)" "429 " \
	"expired: back to the policy's limit of 3 (4 already spent)"
ov list >"$TMP/list"
grep -q '^rl:{tenant:tenant:acme} limit rate=6 .* expires=never$' "$TMP/list"
ok $? "list shows acme's limit ($(tr '\n' '|' <"$TMP/list"))"
grep -q 'rl:{tenant:tenant:initech} deny expires_in=' "$TMP/list"
ok $? "list shows initech's deny with the time left"

# ---- del -----------------------------------------------------------------
ov del tenant tenant=globex >/dev/null 2>&1
ok $? "override del tenant tenant=globex"
sleep 1.2
expect_eq "$(statuses "$AP1" 1 globex)" "429 " \
	"deleted: globex is back under the policy (already over it)"
ov del tenant tenant=globex 2>"$TMP/e"
expect_eq "$?" 1 "del of a key with no override exits 1"

# ---- bad input ------------------------------------------------------------
bad() {
	local what=$1
	shift
	ov "$@" >/dev/null 2>"$TMP/e"
	local st=$?
	[ "$st" = 2 ] && [ "$(grep -c "" "$TMP/e")" -ge 1 ] &&
		head -n 1 "$TMP/e" | grep -q 'spoa-ratelimit override: '
	ok $? "$what: exit 2 ($st) with a clear line ($(head -n 1 "$TMP/e"))"
}
bad "unknown rule" set nosuch tenant=x --deny
bad "missing arg" set tenant --deny
bad "extra arg" set tenant tenant=x user=y --deny
bad "no kind" set tenant tenant=x
bad "two kinds" set tenant tenant=x --allow --deny
bad "rate on a window rule" set tenant tenant=x --rate 10/s
bad "negative limit" set tenant tenant=x --limit -5
bad "absurd limit" set tenant tenant=x --limit 99999999999999999999
bad "zero ttl" set tenant tenant=x --deny --ttl 0s
bad "ttl not a duration" set tenant tenant=x --deny --ttl soon
bad "window on concurrency" set conc tenant=x --limit 2 --window 1m
bad "a limit option on del" del tenant tenant=x --window 1h
bad "--burst on del" del tenant tenant=x --burst 5

# ---- fail: local --------------------------------------------------------
ov set loc tenant=big --limit 5 >/dev/null 2>&1
ok $? "override set loc tenant=big --limit 5"
sleep 1.2
eval "kill \$REDIS_PID_$RP"
sleep 0.5
loc() {
	"$TOOLS/spop-client" -a "127.0.0.1:$AP1" -n "$1" rl-loc "tenant=s:$2" |
		field status | tr '\n' ' '
}
expect_eq "$(loc 6 big)" "0 0 0 0 0 429 " \
	"Redis down: fail: local decides under the override (5, pool of 1)"
expect_eq "$(loc 3 small)" "0 0 429 " \
	"Redis down: a neighbour keeps the policy's 2"

kill -0 "$AGENT_PID" 2>/dev/null
ok $? "the agents keep serving"
finish
