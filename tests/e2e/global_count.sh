#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Exact global count across a pool: two HAProxy instances (the shipped
# haproxy.cfg, two frontends on two ports), each listing three agent
# servers (RL_AGENT, RL_AGENT2, RL_AGENT3) for three agent processes that
# share one Redis. One key is hammered from 16 concurrent keep-alive
# clients (two wrk, 8 connections each, one per HAProxy) and the number of
# 200s, summed over both, must equal the rule's allowance exactly:
#   gcra          rate 1/hour, burst 100          -> 100   (X-Tenant)
#   fixed-window  limit 100 per hour               -> 100   (X-Plan)
#   sliding-log   limit 100 per hour               -> 100   (X-Api-Key)
# Every other answer is the agent's 429; no SPOE error, no degraded
# decision (the rules fail closed, so a late Redis would show as a 503 and
# a short count, never as an extra 200). The haproxy logs must agree with
# wrk (100 lines with rl_status=0 per key), and every agent must have
# decided some of the requests. A try spoiled only by late answers (a
# stalled machine) runs once more on a fresh key (lib-count.bash).
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
. "$(dirname "$0")/lib-count.bash"
need_agent

ALLOW=100
A2P=$(port 5); A3P=$(port 6)
M1=$(port 10); M2=$(port 11); M3=$(port 12)
H2_PORT=$(port 7); APP2_PORT=$(port 8); STATS2_PORT=$(port 9)
export RL_AGENT2="127.0.0.1:$A2P" RL_AGENT3="127.0.0.1:$A3P"

write_count_policy "redis://127.0.0.1:$REDIS_PORT/0"

start_redis "$REDIS_PORT"
start_pool -r "redis://127.0.0.1:$REDIS_PORT/0"

count_lua

# A fixed window of 1 h starts on the hour: do not straddle it.
s=$(( $(date +%s) % 3600 ))
[ $s -gt 3570 ] && sleep $((3601 - s))	# phases run again included

hammer g g X-Tenant 3 hammered hammered2
hammer f f X-Plan 3 hammered hammered2
hammer s s X-Api-Key 3 hammered hammered2

count_final_checks
[ -n "${KEEP_TMP:-}" ] && cp -r "$TMP" "$KEEP_TMP"
finish
