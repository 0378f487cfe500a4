#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# The Redis script against its C twins (tests/integration/test_script.c)
# on a private redis-server: every algorithm and op, the two-phase rule,
# batches, TTLs, and atomicity under 8 concurrent clients; as EVALSHA and
# as FCALL of the FUNCTION library, ARGV packed (msgpack) both times.
. "$(dirname "$0")/../lib.sh"

P=$(port 1)
start_redis "$P"
ok $? "redis-server up on $P"
# the script of the release before the record forms changed, for the
# rolling-upgrade test (skipped without git history)
git -C "$ROOT" show d5d43a2^:agent/store/lua/ratelimit.lua >"$TMP/old.lua" 2>/dev/null &&
	export OLD_RATELIMIT_LUA="$TMP/old.lua"
REDIS_PORT=$P "$ROOT/$BUILD/itests/test_script" --jobs 1
ok $? "test_script: script matches the C twins, ARGV packed (msgpack) as the agent sends it"
REDIS_PORT=$P SCRIPT_FCALL=1 "$ROOT/$BUILD/itests/test_script" --jobs 1
ok $? "test_script: the same through FCALL of the FUNCTION library (Redis 7), as the agent calls it"
finish
