#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Reload under load. wrk (4 connections paced to ~2000 req/s, 200 tenants, statuses counted by a
# Lua script) and a sequential curl loop (--max-time 2) run through haproxy
# while SIGHUP applies:
#   1. a changed policy (tenant burst 5 -> 8, 5/min -> 8/min): applied;
#   2. a broken one (burst: 0): refused, logged reload_failed, old kept;
#   3. a file that is not YAML: the same.
# No request fails (only 200/429), none hangs, the new limits apply to the
# next requests, the broken files change nothing, the agent stays the same
# process, and /metrics counts 1 ok and 2 error reloads.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent
command -v wrk >/dev/null || { echo "not ok - wrk not installed (make deps)"; FAIL=1; finish; }
METRICS_PORT=$(port 6)

# policy BURST RATE: the tenant rule with those numbers.
policy() {
	{
		policy_head 50ms
		cat <<EOF
rules:
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    rate: $2
    burst: $1
    missing: deny
EOF
	} >"$TMP/new.yaml"
	mv "$TMP/new.yaml" "$POLICY"	# atomic: SIGHUP never sees half a file
}

# count TENANT: requests until the first non-200 (at most 15): "N q=Q
# last=CODE", Q from that answer's RateLimit-Policy. One curl sends them
# one after the other on one connection, a few ms in all: a curl per
# request took long enough on a loaded host (under wrk, too) for a unit
# to refill at 8/min (7.5 s), and 9 passed.
count() {
	curl -s --max-time 10 -H "X-Tenant: $1" -o "$TMP/cnt_#1" \
		-w '%{http_code} %header{ratelimit-policy}\n' "$URL/?i=[1-15]" \
		>"$TMP/cnt" 2>/dev/null
	awk '{ c = $1; p = $2 } c != 200 { exit } { n++ }
		END { sub(/.*;q=/, "", p); sub(/;.*/, "", p)
			printf "%d q=%s last=%s\n", n, p, (c == "" ? "000" : c) }' "$TMP/cnt"
}

policy 5 5/min
start_redis "$REDIS_PORT"
stack_agent "$POLICY" -m "127.0.0.1:$METRICS_PORT"
pid0=$AGENT_PID
wait_port "$AGENT_PORT" 10 && wait_port "$METRICS_PORT" 5 &&
	start_haproxy "$HAP_CFG" && wait_port "$HAP_PORT" 10 &&
	wait_port "$STATS_PORT" 5 && wait_srv_state 2 10
ok $? "redis, agent (with metrics) and haproxy up; agent UP"

cat >"$TMP/count.lua" <<'EOF'
local threads = {}
local n = 0
function setup(thread) table.insert(threads, thread) end
function init(args) codes = {} end
function request()
	n = n + 1
	return wrk.format("GET", "/", { ["X-Tenant"] = "load" .. (n % 200) })
end
-- Paced (2 ms between requests per connection, ~2000/s at most): load,
-- not CPU saturation of a shared 2-core box, which would turn into SPOE
-- timeouts that have nothing to do with the reload.
function delay() return 2 end
function response(status, headers, body)
	codes[status] = (codes[status] or 0) + 1
end
function done(summary, latency, requests)
	for _, t in ipairs(threads) do
		for k, v in pairs(t:get("codes")) do
			io.write(string.format("code %d %d\n", k, v))
		end
	end
	local e = summary.errors
	io.write(string.format("errors %d %d %d %d %d\n",
		e.connect, e.read, e.write, e.status, e.timeout))
	io.write(string.format("maxlat_ms %d\n", latency.max / 1000))
end
EOF

# ---- load on ----------------------------------------------------------------
wrk -t 1 -c 4 -d 7s --timeout 2s -s "$TMP/count.lua" "$URL/" >"$TMP/wrk.out" 2>&1 &
wrk_pid=$!
( while [ ! -e "$TMP/stop" ]; do
	c=$(curl -s -o /dev/null -w '%{http_code}' --max-time 2 -H 'X-Tenant: loop' "$URL/" 2>/dev/null)
	echo "${c:-000}" >>"$TMP/loop.codes"
	sleep 0.02
  done ) &
loop_pid=$!
sleep 1

expect_eq "$(count pre)" "5 q=5 last=429" "under load, before any reload: burst 5 (q=5)"

policy 8 8/min
hup reloaded 1; ok $? "SIGHUP with a changed policy: logged reloaded"
expect_eq "$(count post)" "8 q=8 last=429" "the new limits apply: burst 8 (q=8)"

sed 's/burst: 8/burst: 0/' "$POLICY" >"$TMP/bad.yaml"
cp "$POLICY" "$TMP/good.yaml"
mv "$TMP/bad.yaml" "$POLICY"
hup reload_failed 1; ok $? "SIGHUP with burst: 0: logged reload_failed"
expect_eq "$(count broken1)" "8 q=8 last=429" "the refused file changed nothing (still burst 8)"

printf 'rules:\n  - name: [unterminated\n    burst: {{\n' >"$TMP/bad.yaml"
mv "$TMP/bad.yaml" "$POLICY"
hup reload_failed 2; ok $? "SIGHUP with a file that is not YAML: logged reload_failed"
expect_eq "$(count broken2)" "8 q=8 last=429" "still burst 8 after the second refused file"
expect_eq "$(grep -c 'msg=reloaded ' "$TMP/agent.log")" 1 "only the good file was applied"

# ---- load off -----------------------------------------------------------------
wait "$wrk_pid"; ok $? "wrk ran"
touch "$TMP/stop"; wait "$loop_pid"
sleep 0.3
echo "# wrk: $(grep -E '^(code|errors|maxlat)' "$TMP/wrk.out" | tr '\n' ' ')"
total=$(awk '$1 == "code" { s += $3 } END { print s + 0 }' "$TMP/wrk.out")
other=$(awk '$1 == "code" && $2 != 200 && $2 != 429 { printf "%s x%s ", $2, $3 }' "$TMP/wrk.out")
[ "$total" -gt 300 ]; ok $? "wrk: a few hundred requests at least ($total)"
expect_eq "$other" "" "wrk: every answer is 200 or 429"
expect_eq "$(awk '$1 == "errors" { print $2, $3, $4, $6 }' "$TMP/wrk.out")" "0 0 0 0" \
	"wrk: no connect, read, write error or timeout (2 s)"
[ "$(awk '$1 == "code" && $2 == 429 { print $3 }' "$TMP/wrk.out")" -gt 0 ] 2>/dev/null &&
	[ "$(awk '$1 == "code" && $2 == 200 { print $3 }' "$TMP/wrk.out")" -gt 0 ] 2>/dev/null
ok $? "wrk saw both 200 and 429 (the limits were live throughout)"
nloop=$(wc -l <"$TMP/loop.codes")
bad=$(grep -cv -E '^(200|429)$' "$TMP/loop.codes")
[ "$nloop" -gt 20 ]; ok $? "curl loop: $nloop requests"
expect_eq "$bad" 0 "curl loop: none failed or hung past 2 s ($(sort "$TMP/loop.codes" | uniq -c | tr '\n' ' '))"

fe_codes "$TMP/haproxy.log" | sort | uniq -c >"$TMP/codes"
expect_eq "$(awk '$2 != 200 && $2 != 429' "$TMP/codes")" "" "haproxy's log: only 200 and 429 ($(tr '\n' ' ' <"$TMP/codes"))"
! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"
expect_eq "$(grep -c 'rl_error=[1-9]' "$TMP/haproxy.log")" 0 "no rl_error (no SPOE timeout) in any log line"
grep -E 'rl_error=[1-9]|SPOE: ' "$TMP/haproxy.log" | head -5 | sed 's/^/# /'
grep -E 'msg=(reloaded|reload_failed) ' "$TMP/agent.log" | sed 's/^/# /'

kill -0 "$pid0" 2>/dev/null; ok $? "the agent is the same process, still running"
reloads() { metric "$METRICS_PORT" "spoa_rl_policy_reloads_total{result=\"$1\"}"; }
expect_eq "$(reloads ok) $(reloads error)" "1 2" \
	"metrics: 1 ok and 2 error reloads"

# The good file back: applied again.
mv "$TMP/good.yaml" "$POLICY"
hup reloaded 2; ok $? "the fixed file reloads"
expect_eq "$(count fixed)" "8 q=8 last=429" "and its limits apply"

finish
