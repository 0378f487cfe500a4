#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The decision script as a FUNCTION library (scriptlib.h, store.c): on
# Redis 7 the agent loads it at connect and calls it with FCALL, not
# EVALSHA (a library already there, loaded by another link, counts); the
# library's name carries the script's hash; a library gone
# missing (FUNCTION FLUSH, as after a Redis restarted empty) costs one
# EVAL and is loaded again, with every decision still exact; and a user
# without FUNCTION rights keeps EVALSHA, exact too, and says so once.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); AP2=$(port 3)
start_redis "$RP"
ok $? "redis-server up on $RP"

# cmdstat PORT CMD [REDIS-CLI ARGS]: calls of CMD Redis has run
cmdstat() {
	p=$1 cmd=$2; shift 2
	rc "$p" "$@" info commandstats | tr -d '\r' |
		awk -F'[=,:]' -v c="cmdstat_$cmd" '$1 == c { n += $3 } END { print n + 0 }'
}
# allowed N TENANT [PORT]: how many of N pipelined requests were allowed
allowed() {
	"$CLIENT" -a "127.0.0.1:${3:-$AP}" -n "$1" -P 10 rl-a "tenant=s:$2" |
		grep -c '^ack.* status=0 '
}
policy() {	# policy LISTEN-PORT REDIS-URL
	cat <<YAML
listen: 127.0.0.1:$1
workers: 2
redis: { url: "$2", timeout: 500ms }
processing_timeout: 1s
rules:
  - { name: g, message: rl-a, key: "g:{tenant}", algorithm: gcra, rate: 1/hour, burst: 10 }
  - { name: w, message: rl-a, key: "w:{tenant}", algorithm: fixed-window, limit: 100, window: 1h }
YAML
}

policy "$AP" "redis://127.0.0.1:$RP/0" >"$TMP/policy.yaml"
agent_up "$TMP/policy.yaml"

# ---- 1. FCALL on Redis 7 ------------------------------------------------------
until_ok 30 sh -c "redis-cli -p $RP function list | grep -q '^spoa_rl_[0-9a-f]\{16\}$'"
ok $? "the library spoa_rl_<16 hex digits> is loaded at connect"
expect_eq "$(allowed 25 acme)" 10 "25 requests through FCALL: exactly the burst of 10 allowed"
[ "$(cmdstat "$RP" fcall)" -ge 1 ]
ok $? "the calls were FCALLs ($(cmdstat "$RP" fcall))"
expect_eq "$(cmdstat "$RP" evalsha)" 0 "and no EVALSHA"
expect_eq "$(rc "$RP" type 'rl:{w:w:acme}')" hash \
	"the window rule (another algorithm, on the library's lazily made helpers) charged too"

# ---- 1a. the library keeps no state from call to call ---------------------------
# 20,000 token-bucket charges on distinct keys, straight through FCALL (one
# check each: rule algo 1 = token bucket, 10/s, burst 10, no penalty box,
# no reservation lease; code 16 = rule 1 CHECK; packed as the agent packs
# it, batch.h: the msgpack array [1, 1, 1, 10, 1000000, 10, 0, 0, 0, 1, 16]):
# a per-call table kept by the library
# would hold ~100 B per key.
LIB=$(rc "$RP" function list | grep '^spoa_rl_' | head -1)
vmf() { rc "$RP" info memory | tr -d '\r' | sed -n 's/^used_memory_vm_functions://p'; }
m0=$(vmf)
# (the last key is looked at in the same pipeline: it lives 100 ms)
last=$({
	for k in $(seq 20000); do
		printf 'FCALL %s 1 rl:{tb:%d} "\\x9b\\x01\\x01\\x01\\x0a\\xce\\x00\\x0f\\x42\\x40\\x0a\\x00\\x00\\x00\\x01\\x10"\n' \
			"$LIB" "$k"
	done
	echo 'EXISTS rl:{tb:20000}'
} | redis-cli -p "$RP" | tail -n 1)
m1=$(vmf)
expect_eq "$last" 1 "20,000 token-bucket keys charged through FCALL"
[ $((m1 - m0)) -lt 1000000 ]
ok $? "the library's Lua memory did not grow with them ($m0 -> $m1 bytes)"

# ---- 1b. a restart finds the library there: no compile, FCALL still -----------
kill "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null
AGENT_LOG=$TMP/agent1b.log agent_up "$TMP/policy.yaml"
f0=$(cmdstat "$RP" fcall)
expect_eq "$(allowed 12 epsilon)" 10 "a restarted agent, the library already loaded: 10 of 12 allowed"
[ "$(cmdstat "$RP" fcall)" -gt "$f0" ] && [ "$(cmdstat "$RP" evalsha)" = 0 ]
ok $? "through FCALL: \"already exists\" counts as loaded"
! grep -q redis_functions_unavailable "$TMP/agent1b.log"
ok $? "and nothing logged about it"

# ---- 2. the library gone: one EVAL, loaded again, still exact -------------------
rc "$RP" function flush >/dev/null
ok $? "FUNCTION FLUSH (a Redis restarted empty looks the same)"
expect_eq "$(allowed 25 beta)" 10 "after the flush: still exactly 10 of 25 allowed"
[ "$(cmdstat "$RP" eval)" -ge 1 ]
ok $? "the call that found no library was resent with EVAL ($(cmdstat "$RP" eval))"
until_ok 30 sh -c "redis-cli -p $RP function list | grep -q '^spoa_rl_'"
ok $? "the library is loaded again"
expect_eq "$(allowed 5 acme)" 0 "acme's state survived: still denied"
f0=$(cmdstat "$RP" fcall); e0=$(cmdstat "$RP" eval)
expect_eq "$(allowed 12 delta)" 10 "a new tenant after the reload: 10 of 12 allowed"
[ "$(cmdstat "$RP" fcall)" -gt "$f0" ] && [ "$(cmdstat "$RP" eval)" = "$e0" ]
ok $? "through FCALL again ($f0 -> $(cmdstat "$RP" fcall) calls, no more EVAL)"

# ---- 2b. over maxmemory, a release still runs ---------------------------------
# Redis refuses an FCALL that may write before it runs when over maxmemory;
# an EVAL only at a command that would use memory, and ZREM is not one. So
# a batch refused OOM as FCALL is resent as EVAL: the release goes through.
cat >"$TMP/policy-oom.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms }
processing_timeout: 1s
rules:
  - { name: conc, message: rl-req, key: "c:{tenant}", algorithm: concurrency,
      limit: 1, lease: 10m, id: "{id}", release: rl-done, fail: open }
YAML
kill "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null
AGENT_LOG=$TMP/agent-oom.log agent_up "$TMP/policy-oom.yaml"
cv() { "$CLIENT" -a "127.0.0.1:$AP" "$@" | grep '^ack' | sed 's/.* status=\([0-9]*\).* degraded=\([0-9]*\).*/\1\/\2/'; }
rejected() { rc "$RP" info commandstats | tr -d '\r' | sed -n 's/^cmdstat_fcall:.*rejected_calls=\([0-9]*\).*/\1/p'; }
expect_eq "$(cv rl-req tenant=s:oom id=s:req1)" "0/0" "concurrency limit 1: the first request takes the lease"
rc "$RP" config set maxmemory 1 >/dev/null
j0=$(rejected)
expect_eq "$(cv rl-done tenant=s:oom id=s:req1)" "0/0" \
	"over maxmemory: its release runs (resent as EVAL), not degraded"
rc "$RP" config set maxmemory 0 >/dev/null
[ "$(rejected)" -gt "$j0" ]
ok $? "the release went as FCALL first, refused OOM by Redis ($j0 -> $(rejected))"
expect_eq "$(rc "$RP" zcard 'rl:{conc:c:oom}')" 0 "no lease is left in Redis"
expect_eq "$(cv rl-req tenant=s:oom id=s:req2)" "0/0" "so the next request gets the slot"

# ---- 3. no FUNCTION rights: EVALSHA, exact, said once -------------------------
rc "$RP" acl setuser nofn on '>pw-nofn-4e1b' '~*' '+@all' '-function' >/dev/null
policy "$AP2" "redis://nofn:pw-nofn-4e1b@127.0.0.1:$RP/0" >"$TMP/policy2.yaml"
AGENT_LOG=$TMP/agent2.log agent_up "$TMP/policy2.yaml"
until_ok 30 grep -q 'redis_functions_unavailable' "$TMP/agent2.log"
ok $? "an ACL user without FUNCTION: redis_functions_unavailable logged"
s0=$(cmdstat "$RP" evalsha)
expect_eq "$(allowed 25 gamma "$AP2")" 10 "through EVALSHA: exactly 10 of 25 allowed"
[ "$(cmdstat "$RP" evalsha)" -gt "$s0" ]
ok $? "those calls were EVALSHAs"
expect_eq "$(grep -c 'redis_functions_unavailable' "$TMP/agent2.log")" 2 \
	"said once per worker's link, not per call"
finish
