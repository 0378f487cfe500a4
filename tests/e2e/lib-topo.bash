# SPDX-License-Identifier: Apache-2.0
# Helpers for the Redis topology e2e suites (faults_topo.sh,
# global_count_cluster.sh), sourced after tests/lib.sh (and usually
# lib-e2e.bash). Not a test itself (scripts/run-suite.sh only runs *.sh).
# Every server started here is in $PIDS, so lib.sh's EXIT trap kills it.

# start_cluster_node PORT BUSPORT: one --cluster-enabled master (its pid in
# CPID_PORT), config in $TMP/cPORT; running it again on the same PORT
# restarts the node with its nodes.conf (it rejoins, with no data).
start_cluster_node() {
	mkdir -p "$TMP/c$1"
	redis-server --port "$1" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$TMP/c$1" --cluster-enabled yes \
		--cluster-config-file "$TMP/c$1/nodes.conf" \
		--cluster-port "$2" --cluster-node-timeout 2000 \
		--cluster-require-full-coverage no \
		--daemonize no >>"$TMP/c$1.log" 2>&1 &
	PIDS="$PIDS $!"
	eval "CPID_$1=$!"
}

# start_cluster P1 P2 P3 B1 B2 B3: three masters (no replicas), the bus on
# B1..B3 (this run's ports, not PORT + 10000); they keep serving their own
# slots when another master is down (cluster-require-full-coverage no).
CLUSTER_PORTS=""
start_cluster() {
	CLUSTER_PORTS="$1 $2 $3"
	start_cluster_node "$1" "$4"; start_cluster_node "$2" "$5"
	start_cluster_node "$3" "$6"
	for p in $CLUSTER_PORTS; do wait_port "$p" 5 || return 1; done
	redis-cli --cluster create "127.0.0.1:$1" "127.0.0.1:$2" "127.0.0.1:$3" \
		--cluster-replicas 0 --cluster-yes >"$TMP/create.log" 2>&1 || return 1
	until_ok 100 cluster_ok
}
cluster_ok() {
	for p in $CLUSTER_PORTS; do
		rc "$p" cluster info | grep -q 'cluster_state:ok' || return 1
	done
}
cluster_url() {
	u=""; for p in $CLUSTER_PORTS; do u="$u${u:+,}127.0.0.1:$p"; done
	echo "redis+cluster://$u"
}
# keyslot KEY (CRC16 from a live node)
keyslot() {
	for p in $CLUSTER_PORTS; do
		s=$(rc "$p" cluster keyslot "$1") && [ -n "$s" ] && { echo "$s"; return; }
	done
}
# node_port ID: the port of the node with that id
node_port() {
	for p in $CLUSTER_PORTS; do
		[ "$(rc "$p" cluster myid)" = "$1" ] && { echo "$p"; return; }
	done
}
# slot_owner SLOT [ASKPORT]: the port of the master serving SLOT, per
# ASKPORT's CLUSTER NODES (default: the first node)
slot_owner() {
	ask=${2:-${CLUSTER_PORTS%% *}}
	id=$(rc "$ask" cluster nodes | awk -v s="$1" '$3 ~ /master/ {
		for (i = 9; i <= NF; i++) { if ($i ~ /^\[/) continue
			split($i, r, "-"); if (r[2] == "") r[2] = r[1]
			if (s >= r[1] && s <= r[2]) print $1 } }')
	node_port "$id"
}

# migrate_slot SLOT DSTPORT: the first half of a migration: DST IMPORTING,
# the owner MIGRATING, every key of the slot MIGRATEd (after this the
# owner answers ASK for them). Sets MIG_SRC.
migrate_slot() {
	MIG_SRC=$(slot_owner "$1")
	src_id=$(rc "$MIG_SRC" cluster myid); dst_id=$(rc "$2" cluster myid)
	rc "$2" cluster setslot "$1" importing "$src_id" >/dev/null
	rc "$MIG_SRC" cluster setslot "$1" migrating "$dst_id" >/dev/null
	for k in $(rc "$MIG_SRC" cluster getkeysinslot "$1" 1000); do
		rc "$MIG_SRC" migrate 127.0.0.1 "$2" "$k" 0 5000 >/dev/null
	done
}
# finish_slot SLOT DSTPORT: the second half: SETSLOT NODE on the new owner,
# then on the old one (which from then on answers MOVED), then the others:
# the order of the Redis Cluster specification (and redis-cli --cluster
# reshard): the other way round, the old owner sends clients to a node
# still IMPORTING, which sends them back (MOVED both ways) for a moment.
finish_slot() {
	dst_id=$(rc "$2" cluster myid); src=$(slot_owner "$1" "$2")
	rc "$2" cluster setslot "$1" node "$dst_id" >/dev/null
	for p in $src $CLUSTER_PORTS; do
		[ "$p" = "$2" ] || rc "$p" cluster setslot "$1" node "$dst_id" >/dev/null
	done
}
# errorstat PORT NAME: INFO errorstats count of NAME (ASK, MOVED, ...)
errorstat() {
	rc "$1" info errorstats | tr -d '\r' | sed -n "s/^errorstat_$2:count=//p" | awk '{ v = $1 } END { printf "%d", v }'
}

# start_sentinels MASTER S1 S2 S3: three sentinels watching mymaster at
# 127.0.0.1:MASTER (quorum 2, down-after 1000 ms, failover-timeout 4000).
start_sentinels() {
	m=$1; shift
	for s in "$@"; do
		mkdir -p "$TMP/s$s"
		cat >"$TMP/s$s/sentinel.conf" <<CONF
port $s
bind 127.0.0.1
daemonize no
dir $TMP/s$s
sentinel monitor mymaster 127.0.0.1 $m 2
sentinel down-after-milliseconds mymaster 1000
sentinel failover-timeout mymaster 4000
sentinel parallel-syncs mymaster 1
CONF
		redis-server "$TMP/s$s/sentinel.conf" --sentinel >"$TMP/s$s.log" 2>&1 &
		PIDS="$PIDS $!"; SENTINEL_PIDS="${SENTINEL_PIDS:-} $!"
	done
	for s in "$@"; do wait_port "$s" 5 || return 1; done
}
# start_sentinel PORT MASTER [GROUP [LINE...]]: one sentinel, alone
# (quorum 1), monitoring 127.0.0.1:MASTER as GROUP (default mymaster), each
# LINE added to its sentinel.conf.
start_sentinel() {
	local port=$1 master=$2 group=${3:-mymaster}
	shift $(($# < 3 ? $# : 3))
	mkdir -p "$TMP/s$port"
	{
		printf 'port %s\nbind 127.0.0.1\ndaemonize no\ndir %s\n' "$port" "$TMP/s$port"
		printf 'sentinel monitor %s 127.0.0.1 %s 1\n' "$group" "$master"
		[ $# -eq 0 ] || printf '%s\n' "$@"
	} >"$TMP/s$port/sentinel.conf"
	redis-server "$TMP/s$port/sentinel.conf" --sentinel >"$TMP/s$port.log" 2>&1 &
	PIDS="$PIDS $!"
	wait_port "$port"
}
synced() { rc "$1" info replication | grep -q 'master_link_status:up'; }
is_master() { [ "$(rc "$1" role | head -1)" = master ]; }
# sentinel_sees_replica SENTINEL PORT / sentinel_peers SENTINEL
sentinel_sees_replica() { rc "$1" sentinel replicas mymaster | grep -qx "127.0.0.1:$2"; }
sentinel_peers() { [ "$(rc "$1" sentinel master mymaster | grep -A1 '^num-other-sentinels$' | tail -1)" = 2 ]; }
sentinel_master_is() { [ "$(rc "$1" sentinel get-master-addr-by-name mymaster | tail -1)" = "$2" ]; }

# master_replica_up MASTER REPLICA: a Redis on each port, the second a
# replica of the first, synced (one ok line).
master_replica_up() {
	start_redis "$1"
	start_redis "$2"
	rc "$2" replicaof 127.0.0.1 "$1" >/dev/null
	until_ok 200 synced "$2"; ok $? "the replica syncs with the master"
}
# sentinel_group_up MASTER REPLICA S1 S2...: master_replica_up, then
# start_sentinels on S1 S2..., each until it sees the replica (ok lines).
sentinel_group_up() {
	_sg_m=$1; _sg_r=$2; shift 2
	master_replica_up "$_sg_m" "$_sg_r"
	start_sentinels "$_sg_m" "$@"; ok $? "$# sentinels"
	for _sg_s in "$@"; do
		until_ok 200 sentinel_sees_replica "$_sg_s" "$_sg_r"
		ok $? "sentinel :$_sg_s sees the replica"
	done
}
# sentinel_agent_up SENTINELS [WORKERS]: the agent on $AP (WORKERS workers,
# default one; redis.timeout 200ms) on redis+sentinel://SENTINELS/mymaster,
# with one fail-open rule "t" for rl-request, counted at t:{tenant}; then
# c ARGS... asks it.
sentinel_agent_up() {
	{
		policy_top "$AP" "redis+sentinel://$1/mymaster" 200ms "${2:-1}"
		cat <<YAML
processing_timeout: 1s
rules:
  - { name: t, message: rl-request, key: "t:{tenant}", rate: 10/s, fail: open }
YAML
	} >"$TMP/policy.yaml"
	c() { "$CLIENT" -a "127.0.0.1:$AP" "$@"; }
	agent_up "$TMP/policy.yaml"
}
# counted_on PORT TENANT: a request of TENANT (through c) is allowed and
# counted on the Redis at PORT. Retried with until_ok: the first request
# may come before the master's link is up (ROLE, SCRIPT LOAD), and is then
# allowed by the fail mode and counted nowhere.
counted_on() {
	[ "$(c rl-request tenant=s:"$2" | field status)" = 0 ] &&
		[ "$(rc "$1" exists "rl:{t:t:$2}")" = 1 ]
}
# failover_followed SENTINEL REPLICA: a failover of mymaster forced
# through SENTINEL, the agent (sentinel_agent_up) hears its +switch-master
# to REPLICA and counts requests there (three ok lines).
failover_followed() {
	expect_eq "$(rc "$1" sentinel failover mymaster)" OK "a failover forced through :$1"
	until_ok 100 grep -q "msg=sentinel_switch_master master=mymaster host=127.0.0.1 port=$2 via=switch-master" "$TMP/agent.log"
	ok $? "the agent hears +switch-master to :$2"
	until_ok 50 counted_on "$2" after; ok $? "requests are counted on the new master :$2"
}
# subscribed_to PORT: the agent logged its subscription to the sentinel
# on PORT.
subscribed_to() { grep -q "msg=sentinel_subscribed host=127.0.0.1 port=$1" "$TMP/agent.log"; }

# A keep-alive-free curl loop (one request per curl, bounded at 1 s):
# load_loop NAME SLEEP HDR_A [HDR_B]: requests $URL/NAME/N; with HDR_B, odd N
# send HDR_A and even N HDR_B. One line per request in $TMP/load.NAME:
#   t0 route n code time_s t1 variant(a|b)
# until $TMP/stop or $TMP/stop.NAME exists.
load_loop() {
	name=$1; pause=$2; ha=$3; hb=${4:-$3}; n=0
	while [ ! -e "$TMP/stop" ] && [ ! -e "$TMP/stop.$name" ]; do
		# $TMP/hold.NAME holds this loop (not the others) while it exists
		until_ok 600 eval '[ ! -e "$TMP/hold.$name" ]'
		n=$((n + 1)); t0=$EPOCHREALTIME
		if [ $((n % 2)) = 1 ]; then h=$ha; v=a; else h=$hb; v=b; fi
		w=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' \
			--max-time 1 -H "$h" -H "${EXTRA_HDR:-X-Nothing: 1}" "$URL/$name/$n" 2>/dev/null)
		case $w in ???\ *) ;; *) w="000 1.0";; esac
		echo "$t0 $name $n $w $EPOCHREALTIME $v" >>"$TMP/load.$name"
		[ "$pause" = 0 ] || sleep "$pause"
	done
}

# join_logs HAPROXY_LOG OUT: one line per request of $TMP/load.*:
#   t0 route n code time_s t1 variant status error degraded ms
# ("- - - -" when HAProxy's log line for it is missing)
join_logs() {
	awk '/"GET \/[a-z]+\/[0-9]+ / {
		p = ""; st = ""; er = ""; dg = ""; ms = ""
		for (i = 1; i <= NF; i++) {
			if ($i == "\"GET") p = $(i + 1)
			else if ($i ~ /^rl_status=/) st = substr($i, 11)
			else if ($i ~ /^rl_error=/) er = substr($i, 10)
			else if ($i ~ /^rl_degraded=/) dg = substr($i, 13)
			else if ($i ~ /^rl_ms=/) ms = substr($i, 7)
		}
		print p, st, er, dg, ms
	}' "$1" >"$TMP/hlog.tmp"
	cat "$TMP"/load.* | sort -n >"$TMP/load.tmp"
	awk 'NR == FNR { h[$1] = $2 " " $3 " " $4 " " $5; next }
	{ k = "/" $2 "/" $3; print $0, (k in h) ? h[k] : "- - - -" }' \
		"$TMP/hlog.tmp" "$TMP/load.tmp" >"$2"
}
