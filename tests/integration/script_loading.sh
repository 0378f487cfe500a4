#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# An agent that connects while Redis is loading its dataset. Every
# command but a few is refused with -LOADING then, the set-up's SCRIPT
# LOAD and FUNCTION LOAD too, and nothing tried them again: once Redis
# was up, every call went as EVAL with the whole script text (tens of kB
# a call) for the life of the connection. The loads are now sent again
# once Redis answers a call, and the calls go back to FCALL.
#
# The dataset: 20000 keys in an RDB, loaded with key-load-delay (µs per
# key) and Redis answering clients every 1 kB of RDB read, so that the
# agent meets -LOADING for a couple of seconds.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
start_redis "$RP"
rc "$RP" eval "for i = 1, 20000 do redis.call('set', 'fill:' .. i, 'v') end" 0 >/dev/null
expect_eq "$(rc "$RP" dbsize)" 20000 "20000 keys to load"
expect_eq "$(rc "$RP" save)" OK "saved to an RDB"
rc "$RP" shutdown nosave >/dev/null
pid=$(eval echo \$REDIS_PID_$RP); wait "$pid" 2>/dev/null
# restarted on the same dir (start_redis's), slow to load
redis-server --port "$RP" --bind 127.0.0.1 --save '' --appendonly no \
	--dir "$TMP/redis-$RP" --daemonize no --key-load-delay 150 \
	--loading-process-events-interval-bytes 1024 >"$TMP/redis-$RP.log" 2>&1 &
PIDS="$PIDS $!"
wait_port "$RP"
loading() { rc "$RP" info persistence | grep -q '^loading:1'; }
loading; ok $? "Redis is loading its dataset"

policy_top "$AP" "redis://127.0.0.1:$RP/0" 100ms 1 >"$TMP/policy.yaml"
cat >>"$TMP/policy.yaml" <<YAML
processing_timeout: 1s
rules:
  - { name: t, message: rl-request, key: "t:{tenant}", rate: 100/s, burst: 100, fail: open }
YAML
agent_up "$TMP/policy.yaml"
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@"; }
refused() { grep -q 'msg=redis_script_load error="LOADING' "$TMP/agent.log"; }
until_ok 50 refused; ok $? "the agent's SCRIPT LOAD met -LOADING"
loaded() { ! loading; }
until_ok 300 loaded; ok $? "Redis has loaded its dataset"
expect_eq "$(rc "$RP" dbsize)" 20000 "... all of it"

# calls N: the agent's script calls of kind N (eval, evalsha, fcall)
calls() {
	rc "$RP" info commandstats | tr -d '\r' |
		awk -F'[=,:]' -v c="cmdstat_$1" '$1 == c { n = $3 } END { print n + 0 }'
}
decided() { [ "$(c rl-request tenant=s:probe | field degraded)" = 0 ]; }
until_ok 100 decided; ok $? "decisions come from Redis again"
e0=$(calls eval)
out=$(c -n 20 rl-request tenant=s:after)
expect_eq "$(echo "$out" | field degraded | sort -u)" 0 "20 more decisions, none degraded"
e1=$(calls eval); f1=$(calls fcall); s1=$(calls evalsha)
echo "# after the load: EVAL $e0 -> $e1, FCALL $f1, EVALSHA $s1"
[ $((e1 - e0)) -le 1 ]; ok $? "at most one of them went as EVAL with the script's text ($((e1 - e0)))"
[ "$f1" -ge 19 ]; ok $? "the others as FCALL of the library loaded since ($f1)"
finish
