#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The fault matrix, through the shipped haproxy.cfg under a steady client
# load: three curl loops, one per fail mode, each request on its own path
# (/open/N, /closed/N, /local/N) so that its curl result (status, time) can
# be matched with HAProxy's log line for it (rl_status, rl_error,
# rl_degraded, rl_ms). One policy, three rules, each keyed by an arg only
# one route sends (missing: skip elsewhere):
#   r-open   key o:{tenant} (X-Tenant)   fail: open
#   r-closed key c:{key}    (X-Api-Key)  fail: closed
#   r-local  key l:{plan}   (X-Plan)     fail: local (pool_size 1)
# with limits far above the load, so every normal decision is an allow.
#
# Faults, each a few seconds of the same load:
#   killed     kill -9, then nothing listens on the port for 3 s (the
#              reconnects are refused), then an empty Redis on the port
#   sigstop    SIGSTOP for 3 s: connected but silent, past redis.timeout
#   restart    SHUTDOWN NOSAVE and an empty Redis at once (scripts lost)
#   flush      SCRIPT FLUSH and FUNCTION FLUSH on the live connection:
#              the library and the script gone (EVAL resend, reload)
#   refusing   maxclients reached for 3 s: the agent's connections are
#              killed and every reconnect is accepted, then refused with
#              "-ERR max number of clients reached"
#
# For each fault and each fail mode: every request got an ACK (its log
# line has rl_error=0 and the agent's decision), every answer is the fail
# mode's (open 200, closed 200 or the agent's 503, local 200), no request
# decision takes longer than redis.timeout + 70 ms (HAProxy's rl_ms; 100 ms,
# the shipped timeout processing) nor
# any request longer than 1 s end to end (curl's time_total), degraded=1
# while Redis is out, and from 2 s after Redis is back every decision is a
# normal one (degraded=0). The worst latency per fault is printed.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

REDIS_TIMEOUT_MS=30
TOLERANCE_MS=70	# budget 100 ms: the shipped timeout processing
BUDGET_MS=$((REDIS_TIMEOUT_MS + TOLERANCE_MS))
OUT_S=3			# seconds Redis is out per fault
RESUME_S=2		# normal decisions again within this many seconds

{
	policy_head ${REDIS_TIMEOUT_MS}ms
	cat <<EOF
pool_size: 1
rules:
  - name: r-open
    message: rl-request
    key: "o:{tenant}"
    algorithm: gcra
    rate: 100000/s
    burst: 100000
    fail: open
    missing: skip
  - name: r-closed
    message: rl-request
    key: "c:{key}"
    algorithm: gcra
    rate: 100000/s
    burst: 100000
    fail: closed
    missing: skip
  - name: r-local
    message: rl-request
    key: "l:{plan}"
    algorithm: fixed-window
    limit: 1000000
    window: 1h
    fail: local
    missing: skip
EOF
} >"$POLICY"
policy_valid "the fault-matrix policy is valid"

start_stack
ok $? "redis, agent and haproxy up; agent UP"

rpid() { eval echo "\$REDIS_PID_$REDIS_PORT"; }
now() { echo "$EPOCHREALTIME"; }
event() { echo "$(now) $*" >>"$TMP/events"; }
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }

# ---- the load: one curl loop per fail mode --------------------------------
loop() {
	name=$1; shift; n=0
	while [ ! -e "$TMP/stop" ]; do
		n=$((n + 1)); t0=$EPOCHREALTIME
		w=$(curl -s -o /dev/null -w '%{http_code} %{time_total}' \
			--max-time 2 "$@" "$URL/$name/$n" 2>/dev/null)
		echo "$t0 $name $n ${w:-000 2.0} $EPOCHREALTIME" >>"$TMP/load.$name"
	done
}
loop open   -H 'X-Tenant: t-open' &
L1=$!
loop closed -H 'X-Api-Key: k-closed' &
L2=$!
loop local  -H 'X-Plan: p-local' &
L3=$!
PIDS="$PIDS $L1 $L2 $L3"

sleep 1.5
event base_end

# ---- the faults ------------------------------------------------------------
# killed: kill -9; the port stays closed (refused reconnects) for OUT_S.
event start killed
kill -9 "$(rpid)"; wait "$(rpid)" 2>/dev/null
sleep "$OUT_S"
# "back" is stamped before Redis can serve: a request that finished
# before it was decided while Redis was out (stamping it after
# start_redis's wait let a request decided by the new Redis count as
# "out").
event back killed
start_redis "$REDIS_PORT"
ok $? "killed: redis back on its port"
sleep $((RESUME_S + 2))

# sigstop: frozen past redis.timeout.
event start sigstop
kill -STOP "$(rpid)"
sleep "$OUT_S"
event back sigstop
kill -CONT "$(rpid)"
sleep $((RESUME_S + 2))

# restart: an empty Redis at once (no data, no scripts).
rcli set canary 1 >/dev/null
event start restart
rcli shutdown nosave >/dev/null 2>&1
wait "$(rpid)" 2>/dev/null
start_redis "$REDIS_PORT"
ok $? "restart: empty redis back on its port"
event back restart
expect_eq "$(rcli exists canary)" 0 "restart: the new Redis is empty"
sleep $((RESUME_S + 2))

# flush: the library and the script gone on the live connection.
event start flush
expect_eq "$(rcli script flush)/$(rcli function flush)" OK/OK \
	"flush: SCRIPT FLUSH and FUNCTION FLUSH"
event back flush
sleep $((RESUME_S + 2))

# refusing: one client slot, held by us; the agent's connections killed.
exec 7<>"/dev/tcp/127.0.0.1/$REDIS_PORT"
event start refusing
printf 'CONFIG SET maxclients 1\r\nCLIENT KILL TYPE normal SKIPME yes\r\n' >&7
read -r -t 2 r1 <&7; read -r -t 2 r2 <&7
expect_eq "${r1%$'\r'} ${r2%$'\r'}" "+OK :$(echo "$r2" | tr -dc 0-9)" \
	"refusing: maxclients 1, the agent's connections killed ($r2 killed)"
sleep 0.5
c=$(rcli ping 2>&1)
case $c in *"max number of clients"*) r=0;; *) r=1;; esac
ok $r "refusing: a new client is refused ('$c')"
sleep $((OUT_S - 1)).5
event back refusing
printf 'CONFIG SET maxclients 10000\r\n' >&7
read -r -t 2 r3 <&7
exec 7>&-
expect_eq "${r3%$'\r'}" "+OK" "refusing: maxclients restored"
sleep $((RESUME_S + 2))

touch "$TMP/stop"
wait "$L1" "$L2" "$L3" 2>/dev/null
sleep 0.5

# ---- analysis --------------------------------------------------------------
cat "$TMP"/load.* | sort -n >"$TMP/load"
# The haproxy log lines of the load: path, rl_status, rl_error, rl_degraded, rl_ms.
awk '/"GET \/(open|closed|local)\// {
	p = ""; st = ""; er = ""; dg = ""; ms = ""
	for (i = 1; i <= NF; i++) {
		if ($i == "\"GET") p = $(i + 1)
		else if ($i ~ /^rl_status=/) st = substr($i, 11)
		else if ($i ~ /^rl_error=/) er = substr($i, 10)
		else if ($i ~ /^rl_degraded=/) dg = substr($i, 13)
		else if ($i ~ /^rl_ms=/) ms = substr($i, 7)
	}
	print p, st, er, dg, ms
}' "$TMP/haproxy.log" >"$TMP/hlog"

# One line per request: t0 route n code time_s t1 status error degraded ms
# (t0 is taken before curl is spawned, t1 after it exits: the request
# happened within [t0, t1])
awk 'NR == FNR { h[$1] = $2 " " $3 " " $4 " " $5; next }
{ k = "/" $2 "/" $3; print $0, (k in h) ? h[k] : "- - - -" }' \
	"$TMP/hlog" "$TMP/load" >"$TMP/joined"

total=$(wc -l <"$TMP/joined")
acked=$(awk '$8 == "0"' "$TMP/joined" | wc -l)
nolog=$(awk '$8 == "-"' "$TMP/joined" | wc -l)
# HAProxy drops a log line now and then when its threads contend for the
# stderr fd (show info: DroppedLogs); such a request is checked by curl's
# result alone: the expected code, and well under timeout processing
# (100 ms), which a missing ACK would have cost.
dropped=$(cli "show info" | tr -d '\r' | sed -n 's/^DroppedLogs: //p')
echo "# $total requests in all ($(awk '{ n[$2]++ } END { for (r in n) printf "%s %d  ", r, n[r] }' "$TMP/joined"))"
[ "$total" -gt 300 ]; ok $? "a steady load: $total requests over the run"
expect_eq "$((acked + nolog))" "$total" "every logged request got the agent's ACK (rl_error=0)"
awk '$8 != "0" && $8 != "-"' "$TMP/joined" | head -5 | sed 's/^/#   no ACK: /'
[ "$nolog" -le "${dropped:-0}" ]
ok $? "requests without a log line ($nolog) are HAProxy's dropped log lines (DroppedLogs ${dropped:-?})"
nolog_bad=$(awk '$8 == "-" && ($5 >= 0.1 || !($4 == 200 || ($2 == "closed" && $4 == 503)))' "$TMP/joined" | wc -l)
expect_eq "$nolog_bad" 0 "and each of them was answered (200/503) in under 100 ms"
awk '$8 == "-"' "$TMP/joined" | head -3 | sed 's/^/#   log dropped: /'
! grep -q 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log"
ok $? "no SPOE errors in the haproxy log"
grep 'SPOE: \[rl-agent\].*st=[1-9]' "$TMP/haproxy.log" | head -3 | sed 's/^/#   /'

# A wrong answer: open/local anything but 200; closed anything but 200 or
# the agent's own 503.
wrong=$(awk '$8 != "-" && !(($4 == 200 && $7 == 0) || ($2 == "closed" && $4 == 503 && $7 == 503))' "$TMP/joined" | wc -l)
expect_eq "$wrong" 0 "every answer is the fail mode's (open/local 200, closed 200 or the agent's 503)"
awk '$8 != "-" && !(($4 == 200 && $7 == 0) || ($2 == "closed" && $4 == 503 && $7 == 503))' "$TMP/joined" |
	head -5 | sed 's/^/#   wrong: /'
# The decision latency is HAProxy's own measure of the SPOE exchange
# (rl_ms, set-process-time); curl's time_total adds the client and the
# shared machine's scheduling (load averages of 10 on 2 cores were seen),
# so it gets the looser end-to-end bound store_down.sh uses.
slow=$(awk -v b="$BUDGET_MS" '$10 + 0 > b' "$TMP/joined" | wc -l)
expect_eq "$slow" 0 "no decision over the budget (rl_ms <= redis.timeout ${REDIS_TIMEOUT_MS}ms + ${TOLERANCE_MS}ms)"
awk -v b="$BUDGET_MS" '$10 + 0 > b' "$TMP/joined" | head -5 | sed 's/^/#   slow: /'
slow=$(awk '$5 * 1000 > 1000' "$TMP/joined" | wc -l)
expect_eq "$slow" 0 "no request over 1 s end to end (curl time_total)"
awk -v b="$BUDGET_MS" '$5 * 1000 > b' "$TMP/joined" | head -5 | sed 's/^/#   curl over the decision budget (not a failure): /'
# (a request whose log line HAProxy dropped has no decision to judge)
base_deg=$(awk -v e="$(awk '$2 == "base_end" { print $1 }' "$TMP/events")" '$6 < e && $8 != "-" && $9 != 0' "$TMP/joined" | wc -l)
expect_eq "$base_deg" 0 "before any fault (requests done before the first one) no decision is degraded"

echo "# fault      mode    reqs  503s  worst-curl-ms  worst-spoe-ms  degraded-while-out  first-normal-after-back-ms (upper bound)"
for f in killed sigstop restart flush refusing; do
	ts=$(awk -v f=$f '$2 == "start" && $3 == f { print $1 }' "$TMP/events")
	tb=$(awk -v f=$f '$2 == "back" && $3 == f { print $1 }' "$TMP/events")
	worst=$(awk -v a="$ts" -v z="$tb" -v r=$RESUME_S '$1 >= a && $1 <= z + r && $5 > m { m = $5 } END { printf "%d", m * 1000 }' "$TMP/joined")
	for m in open closed local; do
		# in the fault's window (start .. back + RESUME_S)
		read -r n n503 wc ws <<<"$(awk -v a="$ts" -v z="$tb" -v r=$RESUME_S -v m=$m '
			$2 == m && $1 >= a && $1 <= z + r { n++; if ($4 == 503) k++
				if ($5 > wc) wc = $5; if ($10 + 0 > ws) ws = $10 + 0 }
			END { printf "%d %d %d %d", n, k, wc * 1000, ws }' "$TMP/joined")"
		# out: from 0.3 s after the fault began until it ended. Requests
		# whose log line HAProxy dropped ($8 "-") carry no decision to
		# judge; they were checked above by curl's result alone.
		read -r nout dout <<<"$(awk -v a="$ts" -v z="$tb" -v m=$m '
			$2 == m && $8 != "-" && $1 >= a + 0.3 && $6 <= z { n++; if ($9 == 1) d++ }
			END { printf "%d %d", n, d }' "$TMP/joined")"
		# back: the first normal decision after Redis returned, and none
		# degraded from RESUME_S on
		first=$(awk -v z="$tb" -v m=$m '$2 == m && $8 != "-" && $1 >= z && $9 == 0 { printf "%d", ($6 - z) * 1000; exit }' "$TMP/joined")
		read -r nlate dlate <<<"$(awk -v z="$tb" -v r=$RESUME_S -v m=$m '
			$2 == m && $8 != "-" && $1 >= z + r && $1 < z + r + 1.5 { n++; if ($9 != 0 || $4 != 200) d++ }
			END { printf "%d %d", n, d }' "$TMP/joined")"
		printf '# %-10s %-7s %4d  %4d  %13d  %13d  %8s  %10s\n' $f $m "$n" "$n503" "$wc" "$ws" \
			"$dout/$nout" "${first:-never}"
		[ "$n" -gt 5 ]; ok $? "$f/$m: load kept up through the fault ($n requests)"
		case $f in
		killed|sigstop|refusing)
			[ "$nout" -gt 0 ] && [ "$dout" = "$nout" ]
			ok $? "$f/$m: degraded=1 on every decision while Redis is out ($dout of $nout)"
			if [ $m = closed ]; then
				[ "$n503" -ge "$nout" ]
				ok $? "$f/closed: the agent answers 503 while Redis is out ($n503 503s, $nout requests out)"
			fi;;
		esac
		awk -v z="$tb" -v r=$RESUME_S -v m=$m '$2 == m && $8 != "-" && $1 >= z + r && $1 < z + r + 1.5 && ($9 != 0 || $4 != 200)' \
			"$TMP/joined" | head -3 | sed "s/^/#   late degraded (t0 route n code time t1 status error degraded rl_ms): /"
		[ "$nlate" -gt 0 ] && [ "$dlate" = 0 ]
		ok $? "$f/$m: normal decisions within ${RESUME_S}s of Redis returning (first after ${first:-never} ms; degraded/non-200 later: $dlate of $nlate)"
	done
	wspoe=$(awk -v a="$ts" -v z="$tb" -v r=$RESUME_S '$1 >= a && $1 <= z + r && $10 + 0 > m { m = $10 + 0 } END { printf "%d", m }' "$TMP/joined")
	echo "# $f: worst-case decision latency ${wspoe} ms (rl_ms, budget ${BUDGET_MS} ms); worst end to end ${worst} ms (curl)"
done
ns=$(rcli info commandstats | tr -d '\r' | sed -n 's/^cmdstat_eval:calls=\([0-9]*\).*/\1/p')
is_posint "$ns"
ok $? "the flush was answered by resending with EVAL (Redis cmdstat_eval calls=${ns:-0}) and decisions resumed (above)"
rcli function list | grep -q '^spoa_rl_'
ok $? "the library was loaded again after the flush"
[ -n "${KEEP_TMP:-}" ] && cp -r "$TMP" "$KEEP_TMP"
finish
