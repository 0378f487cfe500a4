#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Exact global count across a pool over Redis Cluster: three masters (no
# replicas) started here on loopback, three agent processes on
# redis+cluster://, two HAProxy instances (the shipped haproxy.cfg, each
# listing the three agents as rl1..rl3). Flooded from 16 concurrent
# keep-alive clients (two wrk, 8 connections each, one per HAProxy):
#  1. one key per rule; the 200s summed over both must equal the allowance:
#       gcra          rate 1/hour, burst 100   -> 100   (X-Tenant)
#       fixed-window  limit 100 per hour        -> 100   (X-Plan)
#       sliding-log   limit 100 per hour        -> 100   (X-Api-Key)
#  2. several tenants per rule, two keys on each of the three masters,
#     round robin from every connection: each key gets exactly 100, the
#     total is 100 x keys.
# Every other answer is the agent's 429; no SPOE error and no degraded
# decision (the rules fail closed: a late or failed Redis call would be a
# 503 and a short count, never an extra 200). The haproxy logs must agree
# with wrk, per key, and every agent must have decided some requests.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
. "$(dirname "$0")/lib-topo.bash"
need_agent
T_START=$EPOCHREALTIME

ALLOW=100
PER_NODE=2
A2P=$(port 5); A3P=$(port 6)
H2_PORT=$(port 7); APP2_PORT=$(port 8); STATS2_PORT=$(port 9)
M1=$(port 10); M2=$(port 11); M3=$(port 12)
C1=$(port 20); C2=$(port 21); C3=$(port 22)
export RL_AGENT2="127.0.0.1:$A2P" RL_AGENT3="127.0.0.1:$A3P"
hexkey() { printf %s "$1" | sha256sum | cut -c1-32; }

start_cluster "$C1" "$C2" "$C3" "$(port 23)" "$(port 24)" "$(port 25)"
ok $? "3-master Redis Cluster up (cluster_state ok)"

write_count_policy "$(cluster_url)"

start_pool


# RL_HDR: the header; RL_VALS: its values, sent round robin (each thread
# starting at a different one), on path /RL_ROUTE/VALUE.
cat >"$TMP/count.lua" <<'EOF'
local vals = {}
for v in string.gmatch(os.getenv("RL_VALS"), "%S+") do table.insert(vals, v) end
local hdr, route = os.getenv("RL_HDR"), os.getenv("RL_ROUTE")
local i = 0
c200, c429, cother = 0, 0, 0
local threads = {}
function setup(t) table.insert(threads, t) end
function init(args) i = math.random(#vals) end
function request()
	i = i % #vals + 1
	local h = {}
	h[hdr] = vals[i]
	return wrk.format("GET", "/" .. route .. "/" .. vals[i], h)
end
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

# hammer ROUTE RULE HEADER SECONDS VALUE...: 8 connections on each haproxy.
hammer() {
	route=$1; rule=$2; hdr=$3; secs=$4; shift 4
	vals="$*"; nv=$#; want=$((ALLOW * nv))
	wp=""
	for h in "$HAP_PORT" "$H2_PORT"; do
		RL_HDR=$hdr RL_VALS=$vals RL_ROUTE=$route wrk -t 1 -c 8 -d "${secs}s" --timeout 2s \
			-s "$TMP/count.lua" "http://127.0.0.1:$h/" >"$TMP/wrk.$route.$h" 2>&1 &
		wp="$wp $!"
	done
	PIDS="$PIDS $wp"
	wait $wp
	a=0; d=0; o=0; e=0; line=""
	for h in "$HAP_PORT" "$H2_PORT"; do
		f="$TMP/wrk.$route.$h"
		a=$((a + $(v c200 "$f"))); d=$((d + $(v c429 "$f")))
		o=$((o + $(v cother "$f"))); e=$((e + $(v sockerr "$f")))
		line="$line haproxy:$h 200s=$(v c200 "$f") 429s=$(v c429 "$f") maxlat=$(v maxlat_ms "$f")ms;"
	done
	echo "# $route ($nv key(s)): $((a + d + o)) requests,$line"
	[ $((a + d)) -gt $((want * 2)) ]
	ok $? "$route: a real flood ($((a + d + o)) requests for an allowance of $want)"
	expect_eq "$a" "$want" "$route: total 200s over both haproxys equals the allowance ($nv x $ALLOW)"
	expect_eq "$o/$e" "0/0" "$route: no answer but 200/429, no socket errors"
	cat "$TMP/haproxy.log" "$TMP/haproxy2.log" | grep "\"GET /$route/" >"$TMP/log.$route"
	# HAProxy drops a log line now and then (DroppedLogs): a key may show
	# fewer allows in the logs, never more, and the shortfall is what was
	# dropped (the exact total is the 200s counted by wrk above).
	per=""; badk=0; short=0
	for val in $vals; do
		nk=$(grep -c "\"GET /$route/$val HTTP/1.1\" rl_status=0 rl_policy=$rule rl_error=0 " "$TMP/log.$route")
		per="$per $val:$nk"
		[ "$nk" -le "$ALLOW" ] || badk=$((badk + 1))
		short=$((short + ALLOW - nk))
	done
	dropped=$(( $(dropped_logs "$STATS_PORT") + $(dropped_logs "$STATS2_PORT") ))
	expect_eq "$badk" 0 "$route: the haproxy logs show at most $ALLOW allows for each key ($per )"
	[ "$short" -le "$dropped" ]
	ok $? "$route: allows missing from the logs ($short) are HAProxy's dropped log lines ($dropped)"
	bad=$(answered "$TMP/log.$route" | grep -cv 'rl_error=0 .*rl_degraded=0 ')
	expect_eq "$bad" 0 "$route: no SPOE error and no degraded decision"
	grep -v 'rl_error=0 .*rl_degraded=0 ' "$TMP/log.$route" | head -3 | sed 's/^/#   /'
}

# the node (1..3) of a key
node_of() { case $(slot_owner "$(keyslot "$1")") in "$C1") echo 1;; "$C2") echo 2;; "$C3") echo 3;; esac; }
# spread RULE PREFIX [hex]: PER_NODE values per master for RULE's key
spread() {
	n1=0; n2=0; n3=0; out=""
	for i in $(seq 1 300); do
		val=$2$i
		if [ "${3:-}" = hex ]; then k="rl:{$1:$1:$(hexkey "$val")}"; else k="rl:{$1:$1:$val}"; fi
		nd=$(node_of "$k")
		eval "c=\$n$nd"
		[ "$c" -lt $PER_NODE ] || continue
		eval "n$nd=$((c + 1))"; out="$out $val"
		[ $((n1 + n2 + n3)) = $((3 * PER_NODE)) ] && break
	done
	echo "$out"
}
# which masters the single keys live on (for the record)
echo "# single keys on masters: g $(node_of 'rl:{g:g:hammered}'), f $(node_of 'rl:{f:f:hammered}'), s $(node_of "rl:{s:s:$(hexkey hammered)}")"
VG=$(spread g gt); VF=$(spread f fp); VS=$(spread s sk hex)
for vs in "$VG" "$VF" "$VS"; do [ "$(echo $vs | wc -w)" = $((3 * PER_NODE)) ] || false; done
ok $? "multi-key sets: $PER_NODE keys on each of the 3 masters per rule (g:$VG; f:$VF; s:$VS)"

# A fixed window of 1 h starts on the hour: do not straddle it.
s=$(( $(date +%s) % 3600 ))
[ $s -gt 3570 ] && sleep $((3601 - s))

hammer g g X-Tenant 3 hammered
hammer f f X-Plan 3 hammered
hammer s s X-Api-Key 3 hammered
hammer gm g X-Tenant 4 $VG
hammer fm f X-Plan 4 $VF
hammer sm s X-Api-Key 4 $VS

d1=$(metric "$M1" spoa_rl_decisions_total); d2=$(metric "$M2" spoa_rl_decisions_total)
d3=$(metric "$M3" spoa_rl_decisions_total)
echo "# decisions per agent: $d1 $d2 $d3"
[ "$d1" -gt 0 ] && [ "$d2" -gt 0 ] && [ "$d3" -gt 0 ]
ok $? "all three agents decided some of the requests"
! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log" "$TMP/haproxy2.log"
ok $? "no SPOE errors in either haproxy log"
! grep -q 'redis_error\|fail_mode' "$TMP"/agent?.log
ok $? "no Redis error nor fail mode in the agents' logs"
grep -h 'redis_error\|fail_mode' "$TMP"/agent?.log | head -3 | sed 's/^/#   /'
echo "# run time $(awk -v a="$T_START" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
[ -n "${KEEP_TMP:-}" ] && cp -r "$TMP" "$KEEP_TMP"
finish
