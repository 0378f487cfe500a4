# SPDX-License-Identifier: Apache-2.0
# "Up to 10000 overrides; more are refused" (OPERATING.md). The
# set script counts HLEN, which holds "resets" (after any key reset) and
# expired entries it has not dropped yet: a pool at 10000 bans with --ttl
# that all expired cannot take one more, and after a key reset the cap is
# 9999.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1)
start_redis "$RP"
cat >"$TMP/p.yaml" <<YAML
listen: 127.0.0.1:$(port 2)
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms }
processing_timeout: 1s
rules:
  - { name: tenant, message: rl-request, key: "t:{tenant}", algorithm: fixed-window, limit: 3, window: 1h }
YAML
ov() { timeout 20 "$AGENT" override "$@" -f "$TMP/p.yaml"; }
# 10000 bans that have expired (each "deny <end>", end an hour ago), as
# 10000 `override set --deny --ttl` leave them once their time is up
fill='local t = redis.call("TIME"); local past = (tonumber(t[1]) - 3600) * 1000000
for i = 1, tonumber(ARGV[1]) do
  redis.call("HSET", KEYS[1], "o:rl:{tenant:t:k" .. i .. "}", ARGV[2] == "live" and "deny 0" or ("deny " .. string.format("%d", past)))
end
redis.call("HSET", KEYS[1], "gen", 1) redis.call("HSET", KEYS[1], "all", "") return 1'
rc "$RP" eval "$fill" 1 'rl:{overrides}' 10000 expired >/dev/null
ov set tenant tenant=new --deny >"$TMP/o" 2>&1
expect_eq "$?" 0 "10000 expired bans: a new one is taken ($(cat "$TMP/o"))"
rc "$RP" del 'rl:{overrides}' >/dev/null
timeout 10 "$AGENT" key reset -f "$TMP/p.yaml" tenant tenant=x >/dev/null	# creates "resets"
rc "$RP" eval "$fill" 1 'rl:{overrides}' 9999 live >/dev/null
ov set tenant tenant=ten-thousandth --deny >"$TMP/o" 2>&1
expect_eq "$?" 0 "9999 live overrides and a key reset: the 10000th is taken ($(cat "$TMP/o"))"
ov set tenant tenant=one-too-many --deny >/dev/null 2>"$TMP/e"
expect_eq "$?:$(cat "$TMP/e")" "1:spoa-ratelimit override: redis: too many overrides" \
	"... and the 10001st is refused"
finish
