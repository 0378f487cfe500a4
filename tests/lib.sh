# SPDX-License-Identifier: Apache-2.0
# Shared helpers for the shell suites (integration, e2e, bench).
# Source it; every server it starts is stopped by the EXIT trap, and every
# wait is bounded. Ports come from a per-run block of 32 so suites can run
# side by side, in one worktree or several: see port_claim below.
set -u
: "${BUILD:=build}"
ROOT=$(cd "$(dirname "$0")/../.." 2>/dev/null && pwd)
[ -f "$ROOT/Makefile" ] || ROOT=$(pwd)
AGENT="$ROOT/$BUILD/spoa-ratelimit"
# The haproxy binary the suites run (HAPROXY=/path/to/haproxy for another
# version than the one on PATH); exported for the scripts they start.
export HAPROXY="${HAPROXY:-haproxy}"
TOOLS="$ROOT/$BUILD/tools"
CLIENT="$TOOLS/spop-client"
TMP=$(mktemp -d /tmp/spoa-rl-test.XXXXXX)
PIDS=""
PASS=0
FAIL=0

cleanup() {
	for p in $PIDS; do kill "$p" 2>/dev/null; done
	sleep 0.2
	for p in $PIDS; do kill -9 "$p" 2>/dev/null; done
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# ---- ports ------------------------------------------------------------
# A suite's ports are PORT_BASE + 0..31, one of PORT_SLOTS blocks from
# 20000 on. They stay below Linux's ephemeral ports (32768+), which
# outgoing connections take: a test port there can be in use by some
# client socket of another test. A base derived from the pid alone made
# two suites of different worktrees, run at once, take the same block now
# and then ("Address already in use"). So a suite claims its block: it
# holds an exclusive flock on $PORT_LOCK_DIR/spoa-rl-ports.<slot>.lock on
# fd 9 for its whole life (the kernel drops it when the suite's shell and
# the servers it started, which inherit fd 9, have exited), and it skips a
# block where something already listens (a suite that forgot a server, a
# process that is no test). Slots are tried from PORT_SLOT0 on (default
# $$ % PORT_SLOTS, so suites started together seldom contend).
# PORT_BASE set by the caller is used as is; it is exported, so a suite
# started by a suite uses its parent's block (at an offset of its own, as
# bench/run.sh gives block.sh), and takes the locks of that block when no
# one holds them. fd 8 and 9 are lib.sh's.
PORT_SLOTS=380
: "${PORT_LOCK_DIR:=/tmp}"

# port_block_free BASE: nothing listens on BASE..BASE+31 (TCP or UDP).
port_block_free() {
	! ss -Hltun "( sport >= :$1 and sport <= :$(($1 + 31)) )" 2>/dev/null |
		grep -q .
}

# port_lock FD SLOT: an exclusive flock on SLOT's lock file through FD (8
# or 9), without waiting; returns 1, FD closed, if someone holds it.
port_lock() {
	if [ "$1" = 8 ]; then
		exec 8>>"$PORT_LOCK_DIR/spoa-rl-ports.$2.lock" || return 1
	else
		exec 9>>"$PORT_LOCK_DIR/spoa-rl-ports.$2.lock" || return 1
	fi
	flock -n "$1" && return 0
	if [ "$1" = 8 ]; then exec 8>&-; else exec 9>&-; fi
	return 1
}

# port_claim: sets PORT_BASE to the first free block from PORT_SLOT0 on,
# holding its lock on fd 9; returns 1 when every block is taken.
port_claim() {
	local _pc_i=0 _pc_s
	while [ "$_pc_i" -lt "$PORT_SLOTS" ]; do
		_pc_s=$(((${PORT_SLOT0:-$$} + _pc_i) % PORT_SLOTS))
		_pc_i=$((_pc_i + 1))
		port_lock 9 "$_pc_s" || continue
		if port_block_free $((20000 + 32 * _pc_s)); then
			PORT_BASE=$((20000 + 32 * _pc_s))
			return 0
		fi
		exec 9>&-
	done
	return 1
}

if [ -n "${PORT_BASE:-}" ]; then
	# the caller's block: its slots locked when free (it may straddle two)
	_pc_s=$(((PORT_BASE - 20000) / 32))
	if [ "$_pc_s" -ge 0 ] && [ "$_pc_s" -lt "$PORT_SLOTS" ]; then
		port_lock 9 "$_pc_s" || :
		[ $(((PORT_BASE - 20000) % 32)) -eq 0 ] ||
			port_lock 8 $((_pc_s + 1)) || :
	fi
elif ! port_claim; then
	echo "lib.sh: no free block of 32 ports in 20000-$((20000 + 32 * PORT_SLOTS - 1))" >&2
	exit 1
fi
export PORT_BASE

# port N: the Nth port of this run.
port() { echo $((PORT_BASE + $1)); }

# rc PORT ARGS...: redis-cli against 127.0.0.1:PORT, its errors hidden.
rc() { p=$1; shift; redis-cli -h 127.0.0.1 -p "$p" "$@" 2>/dev/null; }

# script_calls PORT [REDIS-CLI ARGS...]: the script calls Redis has run:
# EVAL, EVALSHA and FCALL (the agent's calls on Redis 7, store.c).
script_calls() {
	p=$1; shift
	redis-cli -h 127.0.0.1 -p "$p" "$@" info commandstats | tr -d '\r' |
		awk -F'[=,:]' '/^cmdstat_(eval|evalsha|fcall):/ { n += $3 } END { print n + 0 }'
}

# now_ms: the wall clock in milliseconds (bash 5's EPOCHREALTIME: no fork).
now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); }

# until_ok TRIES CMD...: retries CMD every 0.1 s, TRIES times at most.
# (Its counters have names no CMD uses: bash's locals are seen, and
# changed, by the functions it calls.)
until_ok() {
	local _until_n=$1 _until_t=0
	shift
	while [ "$_until_t" -lt "$_until_n" ]; do
		"$@" && return 0
		sleep 0.1
		_until_t=$((_until_t + 1))
	done
	return 1
}

# wait_port PORT [SECONDS]: until something listens on 127.0.0.1:PORT.
wait_port() {
	i=0
	while [ $i -lt $((${2:-5} * 20)) ]; do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.05; i=$((i + 1))
	done
	echo "wait_port: nothing on $1" >&2
	return 1
}

# start_redis PORT [ARGS...]: a private redis-server, no persistence;
# ARGS are more redis-server options (--requirepass PW, say).
start_redis() {
	rport=$1; shift
	mkdir -p "$TMP/redis-$rport"
	redis-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$TMP/redis-$rport" --daemonize no "$@" >"$TMP/redis-$rport.log" 2>&1 &
	eval "REDIS_PID_$rport=$!"
	PIDS="$PIDS $!"
	wait_port "$rport"
}

# start_agent POLICY [ARGS...]: runs the agent; its pid is in AGENT_PID.
# It logs to AGENT_LOG (default $TMP/agent.log; finish shows $TMP/agent*.log).
start_agent() {
	pol=$1; shift
	"$AGENT" -f "$pol" "$@" >>"${AGENT_LOG:-$TMP/agent.log}" 2>&1 &
	AGENT_PID=$!
	PIDS="$PIDS $AGENT_PID"
}

# haproxy_version: "haproxy X.Y.Z (PATH)" of $HAPROXY ("?" when it does
# not run), for the line each suite prints first.
haproxy_version() {
	local v
	v=$("$HAPROXY" -v 2>/dev/null |
		sed -n '1s/^HAProxy version \([^ ]*\).*/\1/p')
	echo "haproxy ${v:-?} ($HAPROXY)"
}

# haproxy_atleast MAJOR.MINOR: $HAPROXY is that version or newer.
haproxy_atleast() {
	"$HAPROXY" -v 2>/dev/null | awk -v want="$1" '
		NR == 1 { split($3, h, "[.-]"); split(want, w, ".")
			exit !(h[1] > w[1] || (h[1] == w[1] && h[2] >= w[2])) }'
}

# agent_addrs POLICY [ARGS...]: the addresses an agent started so will
# listen on, one a line: -l's list, else the policy's top-level listen;
# then -m's, else the policy's metrics listen. "127.0.0.1:PORT" or
# "unix:PATH"; any other form (a name, IPv6) is left to the caller.
agent_addrs() {
	_pol=$1; shift
	_l=""; _m=""
	while [ $# -gt 0 ]; do
		case $1 in -l) _l=${2:-} ;; -m) _m=${2:-} ;; esac
		shift
	done
	[ -n "$_l" ] || _l=$(sed -n 's/^listen: *"\{0,1\}\([^" ]*\).*/\1/p' "$_pol")
	[ -n "$_m" ] || _m=$(sed -n \
		's/^\(metrics: *{ *\| \{1,\}\)listen: *"\{0,1\}\([^" ,}]*\).*/\2/p' "$_pol")
	echo "$_l,$_m" | tr ',' '\n' | grep -E '^(127\.0\.0\.1:[0-9]+|unix:.+)$'
}

# listening ADDR: whether something listens on ADDR, "127.0.0.1:PORT" or
# "unix:PATH".
listening() {
	case $1 in
	unix:*) [ -S "${1#unix:}" ] ;;
	*) (exec 3<>"/dev/tcp/127.0.0.1/${1##*:}") 2>/dev/null ;;
	esac
}

# agent_up POLICY [ARGS...]: start_agent, then waits until the agent listens
# on each of its addresses (agent_addrs), AGENT_WAIT_S seconds at most for
# each (default 5). Returns 1, with the log's tail on stderr, as soon as the
# agent exits or when an address does not come up in time.
agent_up() {
	start_agent "$@"
	for _a in $(agent_addrs "$@"); do
		_tries=$((${AGENT_WAIT_S:-5} * 20))
		until listening "$_a"; do
			if ! kill -0 "$AGENT_PID" 2>/dev/null || [ "$_tries" -le 0 ]; then
				echo "agent_up: the agent ($1) is not listening on $_a; its log:" >&2
				tail -n 20 "${AGENT_LOG:-$TMP/agent.log}" >&2
				return 1
			fi
			sleep 0.05; _tries=$((_tries - 1))
		done
	done
}

# policy_top PORT URL TIMEOUT WORKERS: the first lines of a test policy:
# listen on 127.0.0.1:PORT, WORKERS workers, the Redis at URL with
# TIMEOUT (redis.timeout). The suite writes the rest after them.
policy_top() {
	printf 'listen: 127.0.0.1:%s\nworkers: %s\n' "$1" "$4"
	printf 'redis: { url: "%s", timeout: %s }\n' "$2" "$3"
}

# redis_agent_up WORKERS TIMEOUT [AGENT ARGS...]: the preamble most suites
# share: a Redis on $RP, the policy $TMP/policy.yaml (policy_top for $AP
# and that Redis, then the suite's lines from stdin: rules and any other
# keys) and the agent on it (agent_up, with AGENT ARGS).
redis_agent_up() {
	_workers=$1; _timeout=$2; shift 2
	start_redis "$RP" || return 1
	{
		policy_top "$AP" "redis://127.0.0.1:$RP/0" "$_timeout" \
			"$_workers"
		cat
	} >"$TMP/policy.yaml"
	agent_up "$TMP/policy.yaml" "$@"
}

# admin_on: an admin token in $TMP/token (and TOKEN), and in ADMIN_YAML the
# policy lines of an admin API on 127.0.0.1:$AM that takes it, with the
# processing_timeout of 1s the admin suites use.
admin_on() {
	TOKEN="test-admin-token-$$-abcdefgh"
	printf '%s\n' "$TOKEN" >"$TMP/token"
	ADMIN_YAML="processing_timeout: 1s
admin: { listen: \"127.0.0.1:$AM\", token_file: \"$TMP/token\" }"
}

# reserve_rule NAME MESSAGE RESULT_MESSAGE [FAIL]: the YAML of a reserving
# rule, one item of a policy's rules: list: gcra on "t:{tenant}", 1000 a
# day (burst 1000), reserving "{max_tokens}" for 1h and settled with
# "{cost}" on RESULT_MESSAGE; "fail: FAIL" when given.
reserve_rule() {
	cat <<YAML
  - name: $1
    message: $2
    key: "t:{tenant}"
    algorithm: gcra
    rate: 1000/d
    burst: 1000
    reserve: "{max_tokens}"
    cost: "{cost}"
    lease: 1h
    result_message: $3
YAML
	if [ -n "${4:-}" ]; then echo "    fail: $4"; fi
}

# start_haproxy CFG: $HAPROXY in the foreground (-db), pid in HAPROXY_PID.
start_haproxy() {
	"$HAPROXY" -db -f "$1" >>"$TMP/haproxy.log" 2>&1 &
	HAPROXY_PID=$!
	PIDS="$PIDS $HAPROXY_PID"
}

# field NAME: the value of NAME=... on each spop-client line read.
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }

# metric PORT NAME: a sample of the agent's /metrics on 127.0.0.1:PORT,
# rounded to an integer; 0 when it is absent or the agent unreachable.
# NAME is a name with its labels (one series), or a bare name (the sum of
# every series of that name).
metric() {
	curl -s --max-time 2 "http://127.0.0.1:$1/metrics" |
		awk -v n="$2" '$1 == n || index($1, n "{") == 1 { s += $NF }
			END { printf "%.0f", s }'
}

# ok CONDITION-EXIT-STATUS NAME: records one assertion.
ok() {
	if [ "$1" -eq 0 ]; then PASS=$((PASS + 1)); echo "ok - $2"
	else FAIL=$((FAIL + 1)); echo "not ok - $2"; fi
}

# expect_eq GOT WANT NAME
expect_eq() {
	if [ "$1" = "$2" ]; then ok 0 "$3"
	else ok 1 "$3 (got '$1', want '$2')"; fi
}

# finish: prints the summary line and exits non-zero on any failure.
finish() {
	echo "$(basename "$0"): $PASS passed, $FAIL failed"
	if [ "$FAIL" -ne 0 ]; then
		for f in "$TMP"/agent*.log; do
			[ -f "$f" ] || continue
			echo "--- $(basename "$f"): warnings and errors, then the tail"
			grep -E 'level=(warn|error)' "$f" | head -n 20
			tail -n 25 "$f"
		done
		echo "--- haproxy log"; tail -n 20 "$TMP/haproxy.log" 2>/dev/null
		exit 1
	fi
	exit 0
}

# distinct_slots PORT KEY...: true when the KEYs hash to as many Cluster
# slots as there are KEYs (asked of the node on PORT): a suite's checks
# then span that many script calls.
distinct_slots() {
	local port=$1 k
	shift
	[ "$(for k in "$@"; do
		redis-cli -h 127.0.0.1 -p "$port" cluster keyslot "$k"
	done | sort -u | wc -l)" = $# ]
}

# cluster3_up P1 P2 P3: three Redis Cluster masters on those ports (their
# bus ports are this run's too: port 11..13, not the default port + 10000),
# joined by redis-cli --cluster create, checked with two ok lines. Sets
# CPID_<port> to each node's pid (a suite kills one with it).
cluster3_up() {
	bus=10
	for p in "$@"; do
		bus=$((bus + 1))
		mkdir -p "$TMP/c$p"
		redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no \
			--dir "$TMP/c$p" --cluster-enabled yes \
			--cluster-config-file "$TMP/c$p/nodes.conf" \
			--cluster-port "$(port $bus)" \
			--cluster-node-timeout 2000 --daemonize no >"$TMP/c$p.log" 2>&1 &
		PIDS="$PIDS $!"
		eval "CPID_$p=$!"
	done
	for p in "$@"; do wait_port "$p"; done
	redis-cli --cluster create $(for p in "$@"; do echo "127.0.0.1:$p"; done) \
		--cluster-replicas 0 --cluster-yes >"$TMP/create.log" 2>&1
	ok $? "redis-cli --cluster create: 3 masters"
	until_ok 100 cluster3_ok "$@"; ok $? "cluster_state is ok on every node"
}
# asking_calls PORT: the ASKING commands that node has run.
asking_calls() {
	_ac=$(rc "$1" info commandstats | sed -n 's/^cmdstat_asking:calls=\([0-9]*\).*/\1/p')
	echo "${_ac:-0}"
}
cluster3_ok() {
	for p in "$@"; do
		rc "$p" cluster info | grep -q 'cluster_state:ok' || return 1
	done
}
