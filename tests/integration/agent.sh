# SPDX-License-Identifier: Apache-2.0
# The agent against a real redis-server, driven over SPOP by spop-client:
# HELLO negotiation, health checks, GCRA limits, pipelining, malformed
# frames (each closes only its own connection), the idle timeout, fail
# modes with Redis down, reload (good and bad files) and drain on SIGTERM.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
redis_agent_up 2 100ms -l "127.0.0.1:$AP,unix:$TMP/agent.sock" <<YAML
idle_timeout: 300ms
processing_timeout: 2s
rules:
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    rate: 5/min
    burst: 5
    fail: open
  - name: watch
    message: rl-shadow
    key: "s:{tenant}"
    rate: 1/min
    burst: 1
    shadow: true
  - name: login
    message: rl-login
    key: "login:{user}"
    algorithm: gcra
    rate: 1/min
    burst: 2
    fail: closed
  - name: slow
    message: rl-slow
    key: "slow:{tenant}"
    algorithm: leaky-bucket
    mode: delay
    rate: 10/s
    burst: 1
    max_delay: 1s
    store: local
YAML
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@"; }

out=$(c -H)
echo "$out" | grep -q 'version=2.0' ; ok $? "health-check HELLO is answered with version 2.0"
echo "$out" | grep -q 'capabilities=pipelining\( \|$\)'; ok $? "only pipelining is announced"

out=$(c -n 7 rl-request tenant=s:acme ip=4:10.0.0.1)
expect_eq "$(echo "$out" | field status | tr '\n' ' ')" "0 0 0 0 0 429 429 " \
	"the first 5 (burst) pass, then 429"
expect_eq "$(echo "$out" | grep "^ack" | sed -n 1p | field remaining)" "4" "remaining counts down from burst-1"
ra=$(echo "$out" | grep "^ack" | sed -n 6p | field retry_after)
[ "$ra" -ge 11 ] && [ "$ra" -le 12 ]; ok $? "retry_after is the emission interval, rounded up (got $ra)"
echo "$out" | grep "^ack" | sed -n 6p | grep -q 'ratelimit="tenant";r=0;t=1[12]'; ok $? "RateLimit field on a denial"
echo "$out" | grep "^ack" | sed -n 1p | grep -q 'ratelimit_policy="tenant";q=5;w=60'; ok $? "RateLimit-Policy field"
out=$(c rl-request tenant=s:other)
expect_eq "$(echo "$out" | field status)" "0" "another tenant is unaffected"
out=$(c rl-request ip=4:10.0.0.1)
expect_eq "$(echo "$out" | field status)" "429" "a missing tenant arg follows missing: deny"
out=$(c rl-request tenant=s:)
expect_eq "$(echo "$out" | field status)" "429" "an empty tenant arg follows missing: deny"
out=$(c rl-unknown tenant=s:x)
expect_eq "$(echo "$out" | field status)" "0" "a message no rule names is allowed"

out=$(c -n 40 -P 20 rl-request tenant=s:pipe)
expect_eq "$(echo "$out" | grep -c '^ack')" "40" "20 pipelined NOTIFYs in flight are all answered"
out=$("$CLIENT" -a "unix:$TMP/agent.sock" rl-request tenant=s:unix)
expect_eq "$(echo "$out" | field status)" "0" "the unix socket serves too"
out=$(c -s 0 rl-request tenant=s:sid0)
echo "$out" | grep -q '^ack sid=0 fid=1 '; ok $? "stream-id 0 is echoed"

out=$(c -F 256 -n 6 rl-request tenant=s:tiny)
echo "$out" | grep -q 'max-frame-size=256'; ok $? "max-frame-size is negotiated down to HAProxy's"
expect_eq "$(echo "$out" | grep '^ack' | sed -n 6p | field status)" "429" \
	"a 256-byte frame size still carries the verdict"
big=$(head -c 12000 /dev/zero | tr '\0' 'x')
out=$(c rl-request tenant=s:"$big")
expect_eq "$(echo "$out" | field status)" "0" "a 12 KB arg in one frame is read whole (key hashed)"

out=$(c -n 5 rl-shadow tenant=s:shady)
expect_eq "$(echo "$out" | field status | tr '\n' ' ')" "0 0 0 0 0 " "a shadow rule never denies"
expect_eq "$(echo "$out" | field shadow | tr '\n' ' ')" "0 1 1 1 1 " "but reports shadow=1 when it would"
expect_eq "$(grep -c 'msg=shadow_deny rule=watch key="rl:{watch:s:shady}"' "$TMP/agent.log")" 1 \
	"and logs it once per key per window"

# malformed input: AGENT-DISCONNECT with the right status, connection closed
out=$(c -x "00000000")
echo "$out" | grep -q 'disconnect status=4'; ok $? "a zero-length frame gets status 4"
out=$(c -x "00010000")
echo "$out" | grep -q 'disconnect status=3'; ok $? "a frame over max-frame-size gets status 3"
out=$(c -x "000000070300000000 0101")
echo "$out" | grep -q 'disconnect status=10'; ok $? "a FIN=0 frame gets status 10"
out=$(c -x "000000076300000001 0101")
echo "$out" | grep -q 'disconnect status=4'; ok $? "an unknown frame type gets status 4"
out=$(c -R -x "00000013 03 00000001 01 01 0a 726c2d72657175657374 00")
echo "$out" | grep -q 'disconnect status=4'; ok $? "a NOTIFY before HELLO gets status 4"
out=$(c -x "00000012 03 00000001 01 01 06 726c2d726571 01 01 78 08")
echo "$out" | grep -q 'disconnect status=4'; ok $? "truncated typed data in a NOTIFY gets status 4"
out=$(c rl-request tenant=s:after)
expect_eq "$(echo "$out" | field status)" "0" "other connections keep being served"

# idle_timeout 300ms: a silent connection gets DISCONNECT status 2
# (timeout); one that sends a NOTIFY every 200 ms is kept past it.
t0=$EPOCHREALTIME
out=$(c -x "" -t 2000)
ms=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) * 1000 }')
echo "$out" | grep -q 'disconnect status=2'; ok $? "an idle connection gets DISCONNECT status 2"
[ "$ms" -ge 250 ] && [ "$ms" -lt 1500 ]; ok $? "at the idle timeout, 300 ms, not before (${ms} ms)"
out=$(c -n 4 -g 200 -W -t 2000 rl-request tenant=s:steady)
expect_eq "$(echo "$out" | grep -c '^ack')" 4 "a peer sending every 200 ms keeps its connection past 300 ms"
echo "$out" | grep -q 'disconnect status=2'; ok $? "and gets the idle DISCONNECT once it falls silent"

# reload: a broken file is refused, a good one applies
cp "$TMP/policy.yaml" "$TMP/good.yaml"
echo "rules: [ { name: x" >"$TMP/policy.yaml"
kill -HUP "$AGENT_PID"; sleep 0.3
out=$(c rl-request tenant=s:reload1)
expect_eq "$(echo "$out" | field status)" "0" "a bad file on SIGHUP changes nothing"
grep -q 'reload_failed' "$TMP/agent.log"; ok $? "the refused reload is logged"
sed 's/burst: 5/burst: 1/' "$TMP/good.yaml" >"$TMP/policy.yaml"
kill -HUP "$AGENT_PID"; sleep 0.3
out=$(c -n 2 rl-request tenant=s:reload2)
expect_eq "$(echo "$out" | field status | tr '\n' ' ')" "0 429 " "a good file on SIGHUP applies (burst 1)"

# Redis down: fail open allows, fail closed answers 503, both degraded
kill "$(eval echo \$REDIS_PID_$RP)"; sleep 0.3
out=$(c rl-request tenant=s:down)
expect_eq "$(echo "$out" | field status)/$(echo "$out" | field degraded)" "0/1" \
	"fail: open allows and sets degraded when Redis is down"
out=$(c rl-login user=s:bob)
expect_eq "$(echo "$out" | field status)/$(echo "$out" | field degraded)" "503/1" \
	"fail: closed answers 503 and sets degraded when Redis is down"
echo "$out" | grep -q 'retry_after=[1-9]'; ok $? "the 503 carries retry_after"
start_redis "$RP"; sleep 1.5
out=$(c rl-login user=s:carol)
expect_eq "$(echo "$out" | field status)/$(echo "$out" | field degraded)" "0/0" \
	"decisions resume after Redis returns"

# drain: SIGTERM answers what is in flight, then exits 0. 10 NOTIFYs go
# out at once to a leaky bucket in delay mode (one slot every 100 ms):
# the first is answered, the other 9 are held 100-900 ms, in flight when
# SIGTERM lands.
c -n 10 -P 10 -v -W -t 3000 rl-slow tenant=s:drain >"$TMP/drain.out" 2>&1 &
cpid=$!
i=0
until [ "$(grep -c '^sent sid' "$TMP/drain.out")" -eq 10 ] &&
	grep -q '^ack' "$TMP/drain.out" || [ $i -ge 100 ]; do
	sleep 0.02; i=$((i + 1))
done
early=$(grep -c '^ack' "$TMP/drain.out")
t0=$EPOCHREALTIME
kill -TERM "$AGENT_PID"
wait "$AGENT_PID"; rc=$?
ms=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", (b - a) * 1000 }')
wait $cpid
[ "$early" -ge 1 ] && [ "$early" -le 5 ]
ok $? "SIGTERM landed with NOTIFYs in flight ($early of 10 ACKed before it)"
expect_eq "$(grep '^sent=' "$TMP/drain.out")" "sent=10 acked=10" \
	"SIGTERM: every NOTIFY sent is ACKed"
expect_eq "$(sed -n 's/^ack sid=1 fid=\([0-9]*\) .*status=0.*/\1/p' "$TMP/drain.out" | sort -n | tr '\n' ' ')" \
	"1 2 3 4 5 6 7 8 9 10 " "SIGTERM: one ACK per frame-id, each allowed"
expect_eq "$(grep -v '^sent' "$TMP/drain.out" | tail -n 1 | sed 's/ message=.*//')" "disconnect status=0" \
	"SIGTERM: after the last ACK, a normal DISCONNECT"
expect_eq "$rc" 0 "the agent exits 0 after draining"
[ "$ms" -ge 700 ] && [ "$ms" -lt 5000 ]
ok $? "it exits once the held ACKs are out (900 ms), within its 5 s drain (${ms} ms)"
! grep -q 'msg=drain_timeout' "$TMP/agent.log"; ok $? "no drain timeout is logged"
finish
