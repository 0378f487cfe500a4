#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# `make run`: Redis, the agent and HAProxy on loopback, HAProxy in the
# foreground. Ctrl-C (or SIGTERM) stops all three and removes the temp dir.
#
#   DEMO_PORT   HAProxy's port (8080)
#   POLICY      the policy file (policies/example.yaml)
#   BUILD       build directory holding spoa-ratelimit (build)
#   HAPROXY     the haproxy binary (haproxy, from PATH)
set -eu

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
AGENT=$ROOT/$BUILD/spoa-ratelimit
POLICY=${POLICY:-$ROOT/policies/example.yaml}
DEMO_PORT=${DEMO_PORT:-8080}
HAPROXY=${HAPROXY:-haproxy}

die() { echo "demo: $*" >&2; exit 1; }
[ -x "$AGENT" ] || die "$AGENT not found: run make first"
[ -f "$POLICY" ] || die "policy $POLICY not found"
command -v redis-server >/dev/null || die "redis-server not installed: make deps"
command -v "$HAPROXY" >/dev/null || die "$HAPROXY not installed: make deps"

# in_use PORT: something listens on 127.0.0.1:PORT.
in_use() {
	if command -v ss >/dev/null 2>&1; then
		ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
	else
		bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
	fi
}

# free_port START: START, or the first free port after it.
free_port() {
	p=$1
	while in_use "$p"; do
		p=$((p + 1))
		[ "$p" -lt $(($1 + 200)) ] || die "no free port near $1"
	done
	echo "$p"
}

DIR=$(mktemp -d /tmp/spoa-rl-demo.XXXXXX)
PIDS=""
cleanup() {
	trap - EXIT INT TERM
	for p in $PIDS; do kill "$p" 2>/dev/null || true; done
	i=0
	for p in $PIDS; do
		while kill -0 "$p" 2>/dev/null && [ $i -lt 30 ]; do
			sleep 0.1; i=$((i + 1))
		done
		kill -9 "$p" 2>/dev/null || true
	done
	rm -rf "$DIR"
	echo "demo: stopped" >&2
}
trap cleanup EXIT
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

# wait_listen PORT PID NAME LOG: until PORT listens, or PID died.
wait_listen() {
	i=0
	while ! in_use "$1"; do
		if ! kill -0 "$2" 2>/dev/null; then
			echo "demo: $3 exited; its log:" >&2
			tail -n 20 "$4" >&2 2>/dev/null || true
			exit 1
		fi
		i=$((i + 1))
		[ $i -lt 100 ] || die "$3 does not listen on $1 after 10 s"
		sleep 0.1
	done
}

in_use "$DEMO_PORT" && die "port $DEMO_PORT is busy (set DEMO_PORT)"

REDIS_PORT=$(free_port 6379)
mkdir -p "$DIR/redis"
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' \
	--appendonly no --dir "$DIR/redis" --daemonize no \
	>"$DIR/redis.log" 2>&1 &
PIDS="$PIDS $!"
wait_listen "$REDIS_PORT" $! redis-server "$DIR/redis.log"

AGENT_PORT=$(free_port 12345)
# The agent logs to this terminal.
"$AGENT" -f "$POLICY" -l "127.0.0.1:$AGENT_PORT" \
	-r "redis://127.0.0.1:$REDIS_PORT/0" &
AGENT_PID=$!
PIDS="$PIDS $AGENT_PID"
wait_listen "$AGENT_PORT" "$AGENT_PID" spoa-ratelimit /dev/null

APP_PORT=$(free_port 8081)
export RL_BIND="127.0.0.1:$DEMO_PORT"
export RL_AGENT="127.0.0.1:$AGENT_PORT"
export RL_APP="127.0.0.1:$APP_PORT"
export RL_SPOE_CONF="$ROOT/haproxy/spoe-ratelimit.conf"
"$HAPROXY" -c -q -f "$ROOT/haproxy/haproxy.cfg" || die "haproxy -c failed"

cat <<EOF

spoa-ratelimit demo
  HAProxy  http://127.0.0.1:$DEMO_PORT   (haproxy/haproxy.cfg)
  agent    127.0.0.1:$AGENT_PORT   policy $POLICY
  Redis    127.0.0.1:$REDIS_PORT   (no persistence; temp dir $DIR)

Try, in another terminal:
  for i in \$(seq 7); do curl -si -H 'X-Tenant: acme' localhost:$DEMO_PORT/ | head -1; done
      5 x 200 (the burst), then 429
  curl -si -H 'X-Tenant: acme' localhost:$DEMO_PORT/
      429 with Retry-After, RateLimit and RateLimit-Policy
  curl -si -H 'X-Tenant: globex' localhost:$DEMO_PORT/
      another tenant: 200, with its own RateLimit headers
  curl -si localhost:$DEMO_PORT/
      no tenant: the rule's "missing:" applies (deny)
  curl -si -X POST -H 'X-Tenant: acme' -H 'X-Login-User: bob' localhost:$DEMO_PORT/login
      a login (401 from the demo app unless -H 'X-Login-Password: letmein')

Ctrl-C stops HAProxy, the agent and Redis.

EOF

"$HAPROXY" -db -f "$ROOT/haproxy/haproxy.cfg" &
HAPROXY_PID=$!
PIDS="$HAPROXY_PID $PIDS"
# wait returns early on a trapped signal; the trap then cleans up.
wait "$HAPROXY_PID" || true
echo "demo: haproxy exited" >&2
