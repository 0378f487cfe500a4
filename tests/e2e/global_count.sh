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
# decided some of the requests.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

ALLOW=100
A2P=$(port 5); A3P=$(port 6)
M1=$(port 10); M2=$(port 11); M3=$(port 12)
H2_PORT=$(port 7); APP2_PORT=$(port 8); STATS2_PORT=$(port 9)
export RL_AGENT2="127.0.0.1:$A2P" RL_AGENT3="127.0.0.1:$A3P"

write_count_policy "redis://127.0.0.1:$REDIS_PORT/0"

start_redis "$REDIS_PORT"
start_pool -r "redis://127.0.0.1:$REDIS_PORT/0"


cat >"$TMP/count.lua" <<'EOF'
wrk.headers[os.getenv("RL_HDR")] = os.getenv("RL_VAL")
c200, c429, cother = 0, 0, 0
local threads = {}
function setup(t) table.insert(threads, t) end
function delay() return 5 end
function response(status, headers, body)
	if status == 200 then c200 = c200 + 1
	elseif status == 429 then c429 = c429 + 1
	else cother = cother + 1 end
end
function done(s, latency, requests)
	local a, b, c = 0, 0, 0
	for _, t in ipairs(threads) do
		a = a + t:get("c200"); b = b + t:get("c429"); c = c + t:get("cother")
	end
	io.write(string.format("wrk c200=%d c429=%d cother=%d sockerr=%d maxlat_ms=%d\n",
		a, b, c, s.errors.connect + s.errors.read + s.errors.write + s.errors.timeout,
		math.floor(latency.max / 1000)))
end
EOF
v() { sed -n "s/^wrk .*$1=\([0-9]*\).*/\1/p" "$2"; }

# hammer NAME HEADER VALUE: 8 connections on each haproxy for 3 s.
hammer() {
	wp=""
	for h in "$HAP_PORT" "$H2_PORT"; do
		RL_HDR=$2 RL_VAL=$3 wrk -t 1 -c 8 -d 3s --timeout 2s -s "$TMP/count.lua" \
			"http://127.0.0.1:$h/$1/" >"$TMP/wrk.$1.$h" 2>&1 &
		wp="$wp $!"
	done
	PIDS="$PIDS $wp"
	wait $wp
	a=0; d=0; o=0; e=0; line=""
	for h in "$HAP_PORT" "$H2_PORT"; do
		f="$TMP/wrk.$1.$h"
		a=$((a + $(v c200 "$f"))); d=$((d + $(v c429 "$f")))
		o=$((o + $(v cother "$f"))); e=$((e + $(v sockerr "$f")))
		line="$line haproxy:$h 200s=$(v c200 "$f") 429s=$(v c429 "$f") maxlat=$(v maxlat_ms "$f")ms;"
	done
	echo "# $1: $((a + d + o)) requests,$line"
	[ $((a + d)) -gt $((ALLOW * 3)) ]
	ok $? "$1: a real flood ($((a + d + o)) requests for an allowance of $ALLOW)"
	expect_eq "$a" "$ALLOW" "$1: total 200s over both haproxys equals the allowance"
	expect_eq "$o/$e" "0/0" "$1: no answer but 200/429, no socket errors"
	logs_ok=$(cat "$TMP/haproxy.log" "$TMP/haproxy2.log" | grep -c "\"GET /$1/ HTTP/1.1\" rl_status=0 rl_policy=$1 rl_error=0 ")
	# fewer only by the log lines HAProxy dropped (DroppedLogs); the exact
	# total is the 200s counted by wrk above
	dropped=$(( $(dropped_logs "$STATS_PORT") + $(dropped_logs "$STATS2_PORT") ))
	[ "$logs_ok" -le "$ALLOW" ] && [ $((ALLOW - logs_ok)) -le "$dropped" ]
	ok $? "$1: the haproxy logs show $ALLOW allows by rule $1, less dropped lines ($logs_ok, $dropped dropped)"
	bad=$(answered "$TMP/haproxy.log" "$TMP/haproxy2.log" | grep "\"GET /$1/ " | grep -cv 'rl_error=0 .*rl_degraded=0 ')
	expect_eq "$bad" 0 "$1: no SPOE error and no degraded decision"
}

# A fixed window of 1 h starts on the hour: do not straddle it.
s=$(( $(date +%s) % 3600 ))
[ $s -gt 3585 ] && sleep $((3601 - s))

hammer g X-Tenant hammered
hammer f X-Plan hammered
hammer s X-Api-Key hammered

d1=$(metric "$M1" spoa_rl_decisions_total); d2=$(metric "$M2" spoa_rl_decisions_total)
d3=$(metric "$M3" spoa_rl_decisions_total)
echo "# decisions per agent: $d1 $d2 $d3"
[ "$d1" -gt 0 ] && [ "$d2" -gt 0 ] && [ "$d3" -gt 0 ]
ok $? "all three agents decided some of the requests"
! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log" "$TMP/haproxy2.log"
ok $? "no SPOE errors in either haproxy log"
[ -n "${KEEP_TMP:-}" ] && cp -r "$TMP" "$KEEP_TMP"
finish
