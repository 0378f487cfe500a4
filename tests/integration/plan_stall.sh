#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A Redis that stops answering while the only commands on the link are
# plan lookups (HGETs of tenants not cached yet: just after a start or a
# reload, or a wave of new tenants). The link must be dropped as for
# stalled script calls, and decisions come back from Redis once it
# answers again. Before, the HGETs were not counted as calls out: the
# stalled link was kept and every new tenant timed out on it until TCP
# gave up (about 15 minutes).
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
redis_agent_up 1 100ms <<YAML
processing_timeout: 1s
plans:
  free: { rate: 1000/s, burst: 1000 }
plan_lookup: { redis_hash: plans, default: free, cache: 60s }
rules:
  - { name: tenant, message: rl-request, key: "tenant:{tenant}", plan: rate, fail: open }
YAML
c() { "$CLIENT" -a "127.0.0.1:$AP" -t 2000 "$@"; }
by_redis() { [ "$(c rl-request tenant=s:$1 | field degraded)" = 0 ]; }
until_ok 50 by_redis warm; ok $? "a tenant decided by Redis"

eval "rpid=\$REDIS_PID_$RP"
kill -STOP "$rpid"
# a new tenant every 100 ms: each one's HGET waits on the stopped Redis
"$CLIENT" -a "127.0.0.1:$AP" -t 3000 -n 150 -g 100 -u rl-request tenant=s:new \
	>"$TMP/new.out" 2>&1 &
NEWPID=$!
PIDS="$PIDS $NEWPID"
dropped() { grep -q 'msg=redis_link_dropped' "$TMP/agent.log"; }
until_ok 120 dropped
ok $? "the stalled link carrying only plan lookups is dropped"
grep -q 'status=0' "$TMP/new.out"
ok $? "meanwhile new tenants are answered (fail: open)"
kill -CONT "$rpid"
until_ok 50 by_redis back
ok $? "Redis answers again: a new tenant is decided by Redis"
kill "$NEWPID" 2>/dev/null
finish
