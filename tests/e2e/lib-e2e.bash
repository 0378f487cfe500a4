# SPDX-License-Identifier: Apache-2.0
# Helpers for tests/e2e/*.sh, sourced after tests/lib.sh (not a test itself:
# scripts/run-suite.sh only runs *.sh). The suites run the shipped
# haproxy/haproxy.cfg and spoe-ratelimit.conf, parameterised through the
# RL_* environment variables they document, with a real redis-server and
# the agent, all on 127.0.0.1. Each suite's first line names the haproxy
# binary's version ($HAPROXY, see tests/lib.sh).
echo "# $(basename "$0"): $(haproxy_version)"

REDIS_PORT=$(port 0)
AGENT_PORT=$(port 1)
HAP_PORT=$(port 2)
APP_PORT=$(port 3)
STATS_PORT=$(port 4)
export RL_BIND="127.0.0.1:$HAP_PORT"
export RL_AGENT="127.0.0.1:$AGENT_PORT"
export RL_APP="127.0.0.1:$APP_PORT"
export RL_STATS_SOCKET="ipv4@127.0.0.1:$STATS_PORT"
export RL_SPOE_CONF="$ROOT/haproxy/spoe-ratelimit.conf"
HAP_CFG="$ROOT/haproxy/haproxy.cfg"
URL="http://127.0.0.1:$HAP_PORT"
POLICY="$TMP/policy.yaml"

# RFC 9651 pieces: an sf-string, a parameter, and one list member of the
# RateLimit / RateLimit-Policy fields (a string item with parameters).
SF_STRING='"([^"\\]|\\.)*"'
SF_PARAM=';[a-z*][a-z0-9_.*-]*(=(-?[0-9]{1,15}|"([^"\\]|\\.)*"|[A-Za-z*][A-Za-z0-9:/!#$%&*+.^_|~-]*|\?[01]))?'
SF_MEMBER="$SF_STRING($SF_PARAM)*"
SF_LIST="^$SF_MEMBER( *, *$SF_MEMBER)*\$"

# policy_head [REDIS_TIMEOUT [REDIS_URL]]: the top of a test policy: this
# stack's listen, 2 workers, and Redis (this stack's, timeout 10ms, unless
# given); the caller writes the rest (rules:...) after it.
policy_head() {
	policy_top "$AGENT_PORT" "${2:-redis://127.0.0.1:$REDIS_PORT/0}" \
		"${1:-10ms}" 2
}

# stack_agent POLICY [ARGS...]: the agent on POLICY, listening where this
# stack's HAProxy looks for it and using this stack's Redis, with more
# ARGS (-m ...); its pid in AGENT_PID.
stack_agent() {
	_pol=$1; shift
	start_agent "$_pol" -l "127.0.0.1:$AGENT_PORT" \
		-r "redis://127.0.0.1:$REDIS_PORT/0" "$@"
}

# restart_agent POLICY: stops the running agent (SIGTERM, 7 s for its
# drain, then SIGKILL), starts it on POLICY (stack_agent) and waits until
# it listens and HAProxy sees it UP.
restart_agent() {
	if [ -n "${AGENT_PID:-}" ]; then
		kill "$AGENT_PID" 2>/dev/null
		until_ok 70 eval '! kill -0 "$AGENT_PID" 2>/dev/null'
		kill -9 "$AGENT_PID" 2>/dev/null
		wait "$AGENT_PID" 2>/dev/null
	fi
	stack_agent "$1"
	wait_port "$AGENT_PORT" 10 && wait_srv_state 2 10
}

# write_policy [TENANT_BURST [TENANT_RATE [REDIS_TIMEOUT]]]: the test
# policy into $POLICY:
# a gcra "tenant" rule (burst 5, 5/min, missing: deny, fail: open) and a
# login rule counting failures per account (3 per 15m, fail: closed).
write_policy() {
	{
		policy_head ${3:-10ms}
		cat <<EOF
rules:
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    rate: ${2:-5/min}
    burst: ${1:-5}
    fail: open
    missing: deny
  - name: login-account
    message: rl-login
    key: "login:user:{user}"
    algorithm: sliding-log
    limit: 3
    window: 15m
    count: failures
    fail: closed
    missing: deny
EOF
	} >"$POLICY"
}

# start_stack: redis, the agent on $POLICY, haproxy; waits until HAProxy
# sees the agent UP.
start_stack() {
	start_redis "$REDIS_PORT" || return 1
	stack_agent "$POLICY" || return 1
	wait_port "$AGENT_PORT" 10 || return 1
	start_haproxy "$HAP_CFG"
	wait_port "$HAP_PORT" 10 || return 1
	wait_port "$STATS_PORT" 5 || return 1
	wait_srv_state 2 10
}

# login_stack MISSING [RULES]: the opening of the suites about the login
# route (login_*.sh, repeated_identity.sh): into $POLICY, policy_head with
# redis.timeout 50ms, then RULES (YAML rule lines, if given), then the
# login-account rule: sliding-log, 2 failures per account in 15m, with
# "missing: MISSING" (no missing: line, the default, when MISSING is
# empty); checks it (policy_valid) and starts the stack (start_stack):
# two ok lines.
login_stack() {
	{
		policy_head 50ms
		echo "rules:"
		if [ -n "${2:-}" ]; then printf '%s\n' "$2"; fi
		cat <<EOF
  - name: login-account
    message: rl-login
    key: "login:user:{user}"
    algorithm: sliding-log
    limit: 2
    window: 15m
    count: failures
EOF
		if [ -n "$1" ]; then echo "    missing: $1"; fi
	} >"$POLICY"
	policy_valid "the policy is valid"
	start_stack
	ok $? "stack up, agent UP"
}

# hup EVENT N: SIGHUP to the agent, then wait (5 s max) for the Nth EVENT
# log line (reloaded, reload_failed).
hup() {
	kill -HUP "$AGENT_PID"
	i=0
	while [ "$(grep -c "msg=$1 " "$TMP/agent.log")" -lt "$2" ] && [ $i -lt 50 ]; do
		sleep 0.1; i=$((i + 1))
	done
	[ "$(grep -c "msg=$1 " "$TMP/agent.log")" -ge "$2" ]
}

# req ARGS...: one curl (2 s max). Prints the status code ("000" when curl
# failed or timed out); headers in $TMP/h, body in $TMP/b, time in $TMP/t.
req() {
	: >"$TMP/h"; : >"$TMP/b"
	curl -s -o "$TMP/b" -D "$TMP/h" -w '%{http_code} %{time_total}' \
		--max-time 2 "$@" >"$TMP/w" 2>/dev/null
	cut -d' ' -f2 "$TMP/w" >"$TMP/t" 2>/dev/null
	code=$(cut -d' ' -f1 "$TMP/w" 2>/dev/null)
	echo "${code:-000}"
}

# hdr NAME: the value of header NAME in the last req's response.
hdr() {
	awk -v n="$(echo "$1" | tr 'A-Z' 'a-z')" -F': ' '
		{ sub(/\r$/, ""); k = tolower($1) }
		k == n { sub(/^[^:]*: */, ""); print; exit }' "$TMP/h"
}

# since_ceil T0 S: S seconds less the time since T0 ($EPOCHREALTIME),
# rounded up (at least 1): the lowest value a countdown of S s that began
# at T0 may show now, since the agent saw less time pass than the shell,
# never more. The countdowns of GCRA and its kin (Retry-After, t) depend
# on how long the requests took, which a loaded host stretches.
since_ceil() {
	awk -v a="$1" -v b="$EPOCHREALTIME" -v s="$2" \
		'BEGIN { w = s - (b - a); n = int(w); if (n < w) n++; print (n < 1 ? 1 : n) }'
}

# last_time_ms: the last req's total time in ms.
last_time_ms() { awk '{ printf "%d", $1 * 1000 }' "$TMP/t"; }

# sf_param VALUE NAME: the value of parameter NAME in a structured field.
sf_param() {
	echo "$1" | tr ';,' '\n\n' | sed -n "s/^ *$2=//p" | head -1
}

is_posint() { case $1 in ''|*[!0-9]*|0*) return 1;; esac; return 0; }

# cli CMD: one command on HAProxy's stats socket (no socat or nc needed).
cli() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$STATS_PORT" || exit 1
		printf '%s\n' "$1" >&3
		timeout 2 cat <&3
	) 2>/dev/null
}

# srv_state: srv_op_state of be_spoa_rl/rl1 (0 DOWN, 2 UP) per the CLI.
srv_state() {
	cli "show servers state be_spoa_rl" |
		awk '$2 == "be_spoa_rl" && $4 == "rl1" { print $6 }'
}

# wait_srv_state STATE SECONDS
wait_srv_state() {
	i=0
	while [ $i -lt $(($2 * 10)) ]; do
		[ "$(srv_state)" = "$1" ] && return 0
		sleep 0.1; i=$((i + 1))
	done
	echo "wait_srv_state: be_spoa_rl/rl1 not in state $1 (is '$(srv_state)')" >&2
	return 1
}

# need_agent: the suites need the agent binary; say so plainly.
need_agent() {
	if [ ! -x "$AGENT" ]; then
		echo "not ok - agent binary $AGENT missing (build it first)"
		FAIL=$((FAIL + 1))
		finish
	fi
}

# ---- the pool of global_count*.sh: 3 agents behind 2 HAProxy instances ---

# start_pool [AGENT_ARGS...]: three agents on AGENT_PORT/A2P/A3P (metrics
# on M1..M3, extra args to each) and two haproxy instances (HAP_PORT and
# H2_PORT, stats on STATS_PORT and STATS2_PORT); records ok lines. The
# caller sets A2P A3P M1 M2 M3 H2_PORT APP2_PORT STATS2_PORT and exports
# RL_AGENT2 / RL_AGENT3.
start_pool() {
	i=1
	for ap in "$AGENT_PORT:$M1" "$A2P:$M2" "$A3P:$M3"; do
		"$AGENT" -f "$POLICY" -l "127.0.0.1:${ap%:*}" -m "127.0.0.1:${ap#*:}" \
			"$@" >>"$TMP/agent$i.log" 2>&1 &
		PIDS="$PIDS $!"; i=$((i + 1))
	done
	wait_port "$AGENT_PORT" 10 && wait_port "$A2P" 10 && wait_port "$A3P" 10
	ok $? "three agents listening"
	# each haproxy its own log file (HAProxy clears O_APPEND on its
	# stderr, so two of them on one file overwrite each other's lines)
	start_haproxy "$HAP_CFG"
	RL_BIND="127.0.0.1:$H2_PORT" RL_APP="127.0.0.1:$APP2_PORT" \
		RL_STATS_SOCKET="ipv4@127.0.0.1:$STATS2_PORT" \
		"$HAPROXY" -db -f "$HAP_CFG" >>"$TMP/haproxy2.log" 2>&1 &
	PIDS="$PIDS $!"
	wait_port "$HAP_PORT" 10 && wait_port "$H2_PORT" 10 &&
		wait_port "$STATS_PORT" 5 && wait_port "$STATS2_PORT" 5
	ok $? "two haproxy instances up"
	all_up=1
	for i in $(seq 100); do
		[ "$(pool_ups "$STATS_PORT")" = 3 ] && [ "$(pool_ups "$STATS2_PORT")" = 3 ] &&
			{ all_up=0; break; }
		sleep 0.1
	done
	ok $all_up "both haproxy instances see rl1, rl2, rl3 UP"
}

# pool_ups STATS_PORT: how many of rl1..rl3 that haproxy sees UP.
pool_ups() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'show servers state be_spoa_rl\n' >&3
		timeout 2 cat <&3
	) 2>/dev/null | awk '$2 == "be_spoa_rl" && $4 ~ /^rl[123]$/ && $6 == 2 { n++ } END { print n + 0 }'
}

# metric PORT NAME comes from tests/lib.sh.

# wrk_count_lua DELAY_MS: a wrk script (X-Tenant: wrk, one request per
# DELAY_MS per connection) whose last line counts the answers by kind:
# "wrk c200=N cother=N connect=N read=N write=N timeout=N maxlat_ms=N".
wrk_count_lua() {
	sed "s/DELAY_MS/$1/" <<'EOF'
wrk.headers["X-Tenant"] = "wrk"
c200, cother, maxlat = 0, 0, 0
local threads = {}
function setup(t) table.insert(threads, t) end
function delay() return DELAY_MS end
function response(status, headers, body)
	if status == 200 then c200 = c200 + 1 else cother = cother + 1 end
end
function done(s, latency, requests)
	local a, b = 0, 0
	for _, t in ipairs(threads) do a = a + t:get("c200"); b = b + t:get("cother") end
	io.write(string.format("wrk c200=%d cother=%d connect=%d read=%d write=%d timeout=%d maxlat_ms=%d\n",
		a, b, s.errors.connect, s.errors.read, s.errors.write, s.errors.timeout,
		math.floor(latency.max / 1000)))
end
EOF
}

# write_count_policy REDIS_URL: the global-count policy into $POLICY: one
# gcra (by tenant), fixed-window (by plan) and sliding-log (by key) rule,
# each allowing exactly $ALLOW per hour, fail closed; and checks it.
write_count_policy() {
	cat >"$POLICY" <<EOF
listen: 127.0.0.1:$AGENT_PORT
workers: 2
redis:
  url: "$1"
  timeout: 50ms
pool_size: 3
rules:
  - name: g
    message: rl-request
    key: "g:{tenant}"
    algorithm: gcra
    rate: 1/hour
    burst: $ALLOW
    fail: closed
    missing: skip
  - name: f
    message: rl-request
    key: "f:{plan}"
    algorithm: fixed-window
    limit: $ALLOW
    window: 1h
    fail: closed
    missing: skip
  - name: s
    message: rl-request
    key: "s:{key}"
    algorithm: sliding-log
    limit: $ALLOW
    window: 1h
    fail: closed
    missing: skip
EOF
	policy_valid "policy valid"
}

# policy_valid NAME: asserts that agent -c accepts $POLICY; NAME and the
# start of what -c printed name the assertion.
policy_valid() {
	"$AGENT" -c -f "$POLICY" >"$TMP/check.out" 2>&1
	ok $? "$1 ($(head -c 200 "$TMP/check.out" | tr '\n' ' '))"
}

# dropped_logs STATS_PORT: log lines that haproxy dropped (show info).
dropped_logs() {
	(
		exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
		printf 'show info\n' >&3
		timeout 2 cat <&3
	) 2>/dev/null | tr -d '\r' | awk -F': ' '$1 == "DroppedLogs" { print $2 + 0; f = 1 } END { if (!f) print 0 }'
}

# answered FILE...: the fe_api lines of the haproxy logs FILE..., except
# the requests the client itself abandoned before any answer: status 400
# with termination state CH-- (the client closed while HAProxy waited:
# wrk stopping with requests in flight, a curl's --max-time). HAProxy 3.3
# logs those where 2.6 logged nothing or -1, 3.1+ with txn.rl.error 4
# ("interrupted"); the request got no answer, so it is no error of the
# limiter's. Any other 400, and any other abort, is printed. The
# log-format is haproxy.cfg's: the timers, %ST, %B, %tsc. How many it
# left out goes to stderr.
answered() { fe_answered line "$@"; }

# fe_codes FILE: the status (%ST) of each line answered() keeps, one a line.
fe_codes() { fe_answered code "$1"; }

# fe_answered line|code FILE...: answered()'s lines, or their statuses.
fe_answered() {
	local what=$1
	shift
	awk -v what="$what" '/ fe_api / {
		for (i = 1; i < NF; i++)
			if ($i ~ /^[-0-9]+\/[-0-9]+\/[-0-9]+\/[-0-9]+\/[-0-9]+$/) {
				if ($(i + 1) == 400 && $(i + 3) == "CH--") n++
				else if (what == "code") print $(i + 1)
				else print
				break
			}
	}
	END { if (n) printf "# %d client aborts (400 CH--) left out\n", n > "/dev/stderr" }' "$@"
}
