#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Every file in policies/ end to end through the shipped haproxy.cfg and
# spoe-ratelimit.conf: the agent runs on each file as shipped (only -l and
# -r point it at this test's ports), and requests exercise its main rules:
#   every file         -c passes; a request is answered 200/429, never 5xx
#   api-plans          free/pro/enterprise tenants get their plan (count
#                      and q), the plan arg, the Redis hash, monthly quota
#                      in the headers, rl-done releases the inflight slots,
#                      the bytes rule charges content-length
#   example            tenant burst 5 then 429; 5 failed logins then 429
#   flood-guard        a flood from one address: 429 from the guards, every
#                      answer 200/429, no SPOE error (the delay rule within
#                      timeout processing)
#   leaky-bucket       the meter's burst, the delay rule's held ACKs
#   login              per account+IP pair, then per account across IPs
#   monthly-quota      monthly and daily windows (counters seeded in Redis)
# Redis and HAProxy stay up; the agent is restarted for each file.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent
RC="redis-cli -p $REDIS_PORT"

# use FILE: (re)starts the agent on policies/FILE.
use() {
	echo "# ---- $1"
	"$AGENT" -c -f "$ROOT/policies/$1" >"$TMP/check.out" 2>&1
	ok $? "$1: -c passes"
	restart_agent "$ROOT/policies/$1"
	ok $? "$1: agent up on it, UP per the health check"
}

# count ARGS...: requests until the first non-200 (at most 120): "N CODE".
count() {
	n=0
	while [ $n -lt 120 ]; do
		c=$(req "$@" "$URL/")
		[ "$c" = 200 ] || break
		n=$((n + 1))
	done
	echo "$n $c"
}
member() {	# member HEADER NAME: the list member of rule NAME
	hdr "$1" | tr ',' '\n' | sed 's/^ *//' | grep "^\"$2\";"
}
body_policy() { sed -n 's/.*"policy":"\([^"]*\)".*/\1/p' "$TMP/b"; }
login() {	# login USER [PASSWORD [SRC-N]]
	# a tenant of its own each time: example.yaml's tenant rule sees logins too
	req --interface "127.0.0.${3:-1}" -X POST -H "X-Tenant: login-$RANDOM$RANDOM" -H "X-Login-User: $1" \
		-H "X-Login-Password: ${2:-wrong}" "$URL/login"
}
smoke() {	# smoke FILE: one plain request, no 5xx/timeout
	c=$(req -H "X-Tenant: smoke-$1" "$URL/")	# rule names repeat across files
	case $c in 200|429) r=0;; *) r=1;; esac
	ok $r "$1: a request is answered 200 or 429 (got $c)"
}

start_redis "$REDIS_PORT"
start_haproxy "$HAP_CFG"
wait_port "$HAP_PORT" 10 && wait_port "$STATS_PORT" 5
ok $? "redis and haproxy (shipped config) up"

known=" api-plans.yaml example.yaml flood-guard.yaml leaky-bucket.yaml login.yaml monthly-quota.yaml "
for f in "$ROOT"/policies/*.yaml; do
	b=$(basename "$f")
	case $known in *" $b "*) continue;; esac
	use "$b"; smoke "$b"	# a new file: at least this much
done

# ---- api-plans.yaml -----------------------------------------------------------
use api-plans.yaml
smoke api-plans.yaml
t0=$(date +%s%N)
r=$(count -H 'X-Tenant: newco'); n=${r% *}
extra=$(( ($(date +%s%N) - t0) / 1000000000 ))	# 60/min: one more per second taken
[ "${r#* }" = 429 ] && [ "$n" -ge 10 ] && [ "$n" -le $((10 + extra)) ]
ok $? "api-plans: a free tenant: burst 10 (+$extra refilled), then 429 (got $r)"
expect_eq "$(member RateLimit-Policy tenant)" '"tenant";q=10;w=10' "api-plans: free plan's tenant rule q=10;w=10 (burst 10 at 60/min)"
expect_eq "$(member RateLimit-Policy tenant-monthly)" '"tenant-monthly";q=10000;w=2592000' \
	"api-plans: free plan's monthly quota q=10000 (calendar month)"
! grep -qiE 'inflight|bytes' "$TMP/h"; ok $? "api-plans: the headers: false rules are not listed"
c=$(req -H 'X-Tenant: acme' "$URL/")
expect_eq "$c $(member RateLimit-Policy tenant)" '200 "tenant";q=100;w=10' "api-plans: acme (tenants: pro) gets pro"
c=$(req -H 'X-Tenant: viaarg' -H 'X-Plan: pro' "$URL/")
expect_eq "$c $(member RateLimit-Policy tenant)" '200 "tenant";q=100;w=10' "api-plans: X-Plan: pro gets pro"
c=$(req -H 'X-Tenant: initech' "$URL/")
expect_eq "$c $(hdr RateLimit-Policy)" '200 "tenant";q=1000;w=10' \
	"api-plans: initech (enterprise, quota: none) has no monthly rule"
$RC HSET plans hashco pro >/dev/null
got=""
for i in 1 2 3 4; do
	req -H 'X-Tenant: hashco' "$URL/" >/dev/null
	got="$got $(sf_param "$(member RateLimit-Policy tenant)" q)"; sleep 0.1
done
case $got in *" 100 100") r=0;; *) r=1;; esac
ok $r "api-plans: HSET plans hashco pro: pro once looked up (q:$got)"
codes=$(for i in $(seq 25); do req -H 'X-Tenant: initech' "$URL/"; done | sort | uniq -c | tr -s ' ')
expect_eq "$codes" " 25 200" "api-plans: 25 sequential requests under inflight limit 20: rl-done frees each slot"
sleep 0.3	# the last rl-done is sent after the response went out
expect_eq "$($RC ZCARD 'rl:{inflight:inflight:initech}')" 0 "api-plans: no inflight lease left in Redis"
c=$(req -X POST -H 'X-Tenant: initech' --data-binary "$(head -c 5000 /dev/zero | tr '\0' x)" "$URL/")
t=$($RC HGET 'rl:{bytes:bytes:initech}' t)
expect_eq "$c $([ -n "$t" ] && [ "$t" -lt $((100000000 * 1000000)) ] && echo charged)" "200 charged" \
	"api-plans: a 5000-byte POST is charged to the bytes bucket"
expect_eq "$(req "$URL/")" 429 "api-plans: no tenant: missing: deny"

# ---- example.yaml ---------------------------------------------------------------
use example.yaml
smoke example.yaml
t0=$EPOCHREALTIME	# the burst's first unit frees 12 s after it
expect_eq "$(count -H 'X-Tenant: ex1')" "5 429" "example: tenant burst 5, then 429"
expect_eq "$(hdr RateLimit-Policy)" '"tenant";q=5;w=60' "example: only the tenant rule in the headers"
lo=$(since_ceil "$t0" 12)
ra=$(hdr Retry-After); is_posint "$ra" && [ "$ra" -ge "$lo" ] && [ "$ra" -le 13 ]
ok $? "example: Retry-After 12 s after the burst's start for 5/min: $lo..13 ('$ra')"
codes=""; for i in 1 2 3; do codes="$codes $(login carol letmein)"; done
expect_eq "$codes" " 200 200 200" "example: successful logins pass and cost nothing"
codes=""; for i in 1 2 3 4 5 6; do codes="$codes $(login bob)"; done
expect_eq "$codes" " 401 401 401 401 401 429" "example: 5 failed logins of bob, then 429"
expect_eq "$(body_policy)" login-account "example: decided by login-account"

# ---- flood-guard.yaml -----------------------------------------------------------
use flood-guard.yaml
smoke flood-guard.yaml
c=$(req -H 'X-Tenant: f' "$URL/")
expect_eq "$c $(hdr RateLimit)" "200 " "flood-guard: allowed, no rule in the headers (all headers: false)"
if command -v wrk >/dev/null; then
	mark=$(wc -l <"$TMP/haproxy.log")
	# Paced (8 connections, 2 ms apart each: ~2000/s at most, 10x the
	# local guard's rate) so the flood does not saturate a shared 2-core
	# box into SPOE timeouts that say nothing about the policy.
	echo 'function delay() return 2 end' >"$TMP/pace.lua"
	wrk -t 1 -c 8 -d 2s --timeout 2s -s "$TMP/pace.lua" -H 'X-Tenant: f' "$URL/" >"$TMP/wrk.out" 2>&1
	sleep 0.3
	tail -n +$((mark + 1)) "$TMP/haproxy.log" >"$TMP/flood.log"
	fe_codes "$TMP/flood.log" | sort | uniq -c >"$TMP/codes"
	echo "# flood: $(tr '\n' ' ' <"$TMP/codes")"
	n429=$(awk '$2 == 429 { print $1 }' "$TMP/codes")
	[ "${n429:-0}" -gt 0 ]; ok $? "flood-guard: a flood from one address gets 429 (${n429:-0})"
	expect_eq "$(awk '$2 != 200 && $2 != 429' "$TMP/codes")" "" "flood-guard: every answer is 200 or 429"
	grep -o 'rl_policy=[a-z-]*' "$TMP/flood.log" | sort | uniq -c | sed 's/^/# /'
fi
# ip-smooth (leaky-bucket, mode: delay) holds an ACK up to max_delay, and the
# shipped spoe-ratelimit.conf gives the whole exchange "timeout processing
# 100ms" (-c refuses a max_delay that does not fit). Deterministically: a
# bucket with a backlog of 190ms (its TAT seeded in Redis, as a flood of
# more than its burst leaves it) must get its answer (a 429) before timeout
# processing, not time out and fail open (rl_error=1, let through unlimited).
sleep 1	# the flood's backlog drains (1000/s)
k='rl:{ip-smooth:ip48:127.0.0.1}'
# TAT = now + DVT (100 x 1ms) + 190ms, from Redis' own clock: the next
# request waits ~190ms minus the time it takes to arrive (max_delay 200ms).
$RC EVAL "local t = redis.call('TIME')
	redis.call('SET', KEYS[1], string.format('%d', t[1] * 1000000 + t[2] + 290000), 'PX', 5000)" \
	1 "$k" >/dev/null
mark=$(wc -l <"$TMP/haproxy.log")
c=$(req -H 'X-Tenant: f' "$URL/")
sleep 0.2
line=$(tail -n +$((mark + 1)) "$TMP/haproxy.log" | grep ' fe_api ' | tail -1)
echo "# held request: $c, ${line##*rl_status}"
case $line in *rl_error=0*) r=0;; *) r=1;; esac
ok $r "flood-guard: a request ip-smooth holds > 100ms (< its max_delay 200ms) is answered within timeout processing 100ms (no rl_error)"

# ---- leaky-bucket.yaml ----------------------------------------------------------
use leaky-bucket.yaml
lmark=$(wc -l <"$TMP/haproxy.log")
smoke leaky-bucket.yaml
# The meter's burst: 60 requests one after the other from one curl on
# one kept-alive connection, so each costs a millisecond, not a fork of
# curl (a curl per request could be slower than the 10/s leak on a loaded
# host, and then no 429 ever came). writes-paced (50/s, delay mode) holds
# each past its burst of 5 for its 20 ms slot, and a request it refused
# would charge nothing (two-phase), so they go one by one, not all at
# once. At most the burst of 20 plus what leaked at 10/s until the first
# 429 (the sum of the transfers' own times) pass, and the meter refuses it.
curl -s --max-time 10 -H 'X-Tenant: lk1' -o "$TMP/lk_#1" \
	-w '%{http_code} %{time_total} %header{ratelimit-policy}\n' \
	"$URL/?i=[1-60]" >"$TMP/lk1.all" 2>/dev/null
k=$(awk '$1 != 200 { print NR; exit }' "$TMP/lk1.all")
n=$((${k:-61} - 1)); first=$(sed -n "${k:-61}p" "$TMP/lk1.all")
el=$(head -n "${k:-60}" "$TMP/lk1.all" | awk '{ s += $2 } END { printf "%.3f", s }')
max=$(awk -v s="$el" 'BEGIN { printf "%d", 20 + int(s * 10) + 1 }')
echo "# meter: $n passed, then '$first' after $el s"
[ "${first%% *}" = 429 ] && [ "$n" -ge 20 ] && [ "$n" -le "$max" ]
ok $? "leaky-bucket: the meter lets its burst of 20 (plus what leaked at 10/s in $el s) through, then 429 ($n, at most $max)"
grep -q '"policy":"tenant"' "$TMP/lk_${k:-61}" 2>/dev/null
ok $? "leaky-bucket: the meter (rule tenant) refused it ($(head -c 200 "$TMP/lk_${k:-61}" 2>/dev/null))"
expect_eq "${first#* * }" '"tenant";q=20;w=2' "leaky-bucket: only the meter in the headers (q=20;w=2)"
# one curl, 8 transfers started together (-Z --parallel-immediate): 8
# background curls could start far enough apart on a loaded host for
# the bucket to leak between them, and then none was held
args=""
for i in $(seq 8); do args="$args -o /dev/null $URL/"; done
# shellcheck disable=SC2086
curl -s -Z --parallel-immediate --parallel-max 8 --max-time 2 -H 'X-Tenant: lk2' \
	-w '%{http_code} %{time_total}\n' $args >"$TMP/lk.all" 2>/dev/null
echo "# 8 at once: $(tr '\n' ' ' <"$TMP/lk.all")"
n200=$(grep -c '^200 ' "$TMP/lk.all"); nbad=$(grep -cvE '^(200|429) ' "$TMP/lk.all")
[ "$n200" -ge 5 ] && [ "$nbad" = 0 ]
ok $? "leaky-bucket: 8 at once: the burst of 5 at least passes, the rest 200 (held) or 429"
held=$(awk '$1 == 200 && $2 >= 0.015' "$TMP/lk.all" | wc -l)
[ "$held" -ge 1 ]; ok $? "leaky-bucket: some of them were held (>= 15 ms: $held)"
sleep 0.2
! tail -n +$((lmark + 1)) "$TMP/haproxy.log" | grep -q 'rl_error=[1-9]'
ok $? "leaky-bucket: the held ACKs came within timeout processing (no rl_error)"

# ---- login.yaml ----------------------------------------------------------------
use login.yaml
smoke login.yaml
c=$(req -H 'X-Tenant: l' "$URL/")
expect_eq "$c $(hdr RateLimit)" "200 " "login: a non-login request matches no rule"
codes=""; for i in 1 2 3; do codes="$codes $(login carol letmein)"; done
expect_eq "$codes" " 200 200 200" "login: successful logins pass"
codes=""; for i in 1 2 3 4; do codes="$codes $(login bob wrong 1)"; done
expect_eq "$codes" " 401 401 401 429" "login: 3 failures of bob from one IP, then 429"
expect_eq "$(body_policy)" login-pair "login: decided by login-pair (account and IP)"
codes="$(login bob wrong 2) $(login bob wrong 3)"
expect_eq "$codes" "401 401" "login: bob from two other IPs: failures 4 and 5 still reach the app"
c=$(login bob letmein 4)
expect_eq "$c $(body_policy)" "429 login-account" "login: from a 4th IP bob is locked (login-account, 5 failures)"
ra=$(hdr Retry-After); is_posint "$ra" && [ "$ra" -le 900 ]
ok $? "login: its Retry-After is within 15m ('$ra')"
expect_eq "$(login dave wrong 4)" 401 "login: another account from that IP is not affected"

# ---- monthly-quota.yaml --------------------------------------------------------
use monthly-quota.yaml
smoke monthly-quota.yaml
c=$(req -H 'X-Tenant: q1' "$URL/")
expect_eq "$c $(hdr RateLimit-Policy)" '200 "monthly";q=100000;w=2592000, "daily";q=20000;w=86400' \
	"monthly-quota: basic plan's monthly quota and the daily cap in the headers"
c=$(req -H 'X-Tenant: acme' "$URL/")
expect_eq "$c $(member RateLimit-Policy monthly)" '200 "monthly";q=5000000;w=2592000' "monthly-quota: acme (business) q=5000000"
c=$(req -H 'X-Tenant: q1' -H 'X-Api-Key: k' "$URL/")
expect_eq "$c $(member RateLimit-Policy api-key-hourly)" '200 "api-key-hourly";q=5000;w=3600' \
	"monthly-quota: with an API key the hourly rule applies too"
# A window counter is the field of the window's index in the rule key's hash.
mk='rl:{monthly:tenant:q1}'; mf=$($RC HKEYS "$mk")
dk='rl:{daily:tenant:q1}'; df=$($RC HKEYS "$dk")
expect_eq "$($RC HGET "$mk" "$mf") $($RC HGET "$dk" "$df")" "2 2" "monthly-quota: the month and day counters in Redis count q1's 2 requests"
$RC HSET "$mk" "$mf" 99999 >/dev/null
c1=$(req -H 'X-Tenant: q1' "$URL/"); r1=$(sf_param "$(member RateLimit monthly)" r)
c2=$(req -H 'X-Tenant: q1' "$URL/")
ra=$(hdr Retry-After); t=$(sf_param "$(member RateLimit monthly)" t)
expect_eq "$c1 $r1 $c2 $(body_policy)" "200 0 429 monthly" "monthly-quota: at 99999 of 100000 one more passes (r=0), then 429 by monthly"
now=$(date -u +%s); y=$(date -u +%Y); m=$(date -u +%m)
eom=$(date -u -d "$y-$m-01 +1 month" +%s); left=$((eom - now))
is_posint "$ra" && [ "$ra" -ge $((left - 5)) ] && [ "$ra" -le $((left + 5)) ] && [ "$ra" -ge "${t:-0}" ]
ok $? "monthly-quota: Retry-After is the end of the UTC month ($ra vs $left s, t=$t)"
req -H 'X-Tenant: q2' "$URL/" >/dev/null
dk2='rl:{daily:tenant:q2}'
$RC HSET "$dk2" "$($RC HKEYS "$dk2")" 20000 >/dev/null
c=$(req -H 'X-Tenant: q2' "$URL/"); ra=$(hdr Retry-After)
left=$((86400 - $(date -u +%s) % 86400))
expect_eq "$c $(body_policy)" "429 daily" "monthly-quota: a tenant at its daily cap: 429 by daily"
is_posint "$ra" && [ "$ra" -ge $((left - 5)) ] && [ "$ra" -le $((left + 5)) ]
ok $? "monthly-quota: Retry-After is the end of the UTC day ($ra vs $left s)"
expect_eq "$(req "$URL/")" 429 "monthly-quota: no tenant: missing: deny"

# ---- all files ------------------------------------------------------------------
! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE processing errors in the haproxy log"
grep 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log" | head -3 | sed 's/^/# /'
nbad=$(fe_codes "$TMP/haproxy.log" | grep -c '^5')
expect_eq "$nbad" 0 "no 5xx answer at all"

finish
