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
# with wrk, per key, and every agent must have decided some requests. A
# try spoiled only by late answers (a stalled machine) runs once more on
# fresh keys (lib-count.bash).
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
. "$(dirname "$0")/lib-topo.bash"
. "$(dirname "$0")/lib-count.bash"
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
count_lua

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
VG2=$(spread g gu); VF2=$(spread f fq); VS2=$(spread s sl hex)	# retries
for vs in "$VG" "$VF" "$VS" "$VG2" "$VF2" "$VS2"; do
	[ "$(echo $vs | wc -w)" = $((3 * PER_NODE)) ] || false
done
ok $? "multi-key sets: $PER_NODE keys on each of the 3 masters per rule (g:$VG; f:$VF; s:$VS; and for a retry)"

# A fixed window of 1 h starts on the hour: do not straddle it.
s=$(( $(date +%s) % 3600 ))
[ $s -gt 3555 ] && sleep $((3601 - s))	# phases run again included

hammer g g X-Tenant 3 hammered hammered2
hammer f f X-Plan 3 hammered hammered2
hammer s s X-Api-Key 3 hammered hammered2
hammer gm g X-Tenant 4 "$VG" "$VG2"
hammer fm f X-Plan 4 "$VF" "$VF2"
hammer sm s X-Api-Key 4 "$VS" "$VS2"

count_final_checks agents
echo "# run time $(awk -v a="$T_START" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
[ -n "${KEEP_TMP:-}" ] && cp -r "$TMP" "$KEEP_TMP"
finish
