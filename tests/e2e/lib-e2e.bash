# Helpers for tests/e2e/*.sh, sourced after tests/lib.sh (not a test itself:
# scripts/run-suite.sh only runs *.sh). The suites run the shipped
# haproxy/haproxy.cfg and spoe-ratelimit.conf, parameterised through the
# RL_* environment variables they document, with a real redis-server and
# the agent, all on 127.0.0.1.

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

# write_policy [TENANT_BURST [TENANT_RATE [REDIS_TIMEOUT]]]: the test
# policy into $POLICY:
# a gcra "tenant" rule (burst 5, 5/min, missing: deny, fail: open) and a
# login rule counting failures per account (3 per 15m, fail: closed).
write_policy() {
	cat >"$POLICY" <<EOF
listen: 127.0.0.1:$AGENT_PORT
workers: 2
redis:
  url: redis://127.0.0.1:$REDIS_PORT/0
  timeout: ${3:-10ms}
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
}

# start_stack: redis, the agent on $POLICY, haproxy; waits until HAProxy
# sees the agent UP.
start_stack() {
	start_redis "$REDIS_PORT" || return 1
	start_agent "$POLICY" -l "127.0.0.1:$AGENT_PORT" \
		-r "redis://127.0.0.1:$REDIS_PORT/0" || return 1
	wait_port "$AGENT_PORT" 10 || return 1
	start_haproxy "$HAP_CFG"
	wait_port "$HAP_PORT" 10 || return 1
	wait_port "$STATS_PORT" 5 || return 1
	wait_srv_state 2 10
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
