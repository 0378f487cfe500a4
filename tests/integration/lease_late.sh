#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Concurrency leases taken by a Redis answer the agent no longer waited for.
# The batch had left when the request's deadline passed; the script still
# ran and took the lease, the agent answered from the fail mode and did not
# set release (it had no result saying a lease was taken), so HAProxy never
# sent rl-done and the slot stayed taken for the whole lease (5m here): one
# latency spike could fill a tenant's slots. The same leak when a
# store: local check refused after Redis had granted, and when the ACK came
# too late for HAProxy (past its timeout processing).
#   1. fail: open, Redis late: the ACK asks for the release, and rl-done
#      frees the slot;
#   2. fail: closed, Redis late: 503, and the agent frees the slot itself
#      (HAProxy sends no rl-done for a refused request), so the limit of 2
#      admits new requests once Redis is back;
#   3. a store: local veto after Redis granted: the refused request's
#      Redis lease is freed by the agent;
#   4. an ACK past processing_timeout (the agent itself stalled): HAProxy
#      has given up on it, the agent frees the lease itself;
#   5. releases (rl-done's and the agent's) still reach Redis while the
#      breaker is open;
#   6. fail: local: a release frees the lease in both tiers.
# And across a dropped link. A stall drops the link once ten script calls
# in a row have failed more than a second after Redis' last reply. The
# charges already written to it stay in its socket and run when Redis
# wakes up; the releases that came after the drop found no link, were
# given up, and the slots stayed taken for the whole lease (5m here):
#   7. rl-done for two requests allowed (degraded) during the stall, and
#      the agent's own release of the 503s sent meanwhile, are sent again
#      until Redis answers, and free the slots;
#   8. a release still unanswered at its lease's end is given up, counted
#      (spoa_rl_lease_releases_lost_total) and logged;
#   9. an rl-done in the NOTIFY of a tenant whose plan lookup runs out of
#      time: the request never went to the store, and the release sent
#      again from it crashed the agent (its store call was never set up:
#      a NULL dereference on a worker's first request).
# Redis is made late with SIGSTOP; every wait is bounded.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); A1=$(port 2); A2=$(port 3); A3=$(port 4); M2=$(port 5)
A4=$(port 6); M4=$(port 7); A5=$(port 8)
start_redis "$RP"
eval "RPID=\$REDIS_PID_$RP"

# conc NAME MESSAGE: a concurrency rule, limit LIMIT (2), lease LEASE (5m)
conc() {
	cat <<YAML
  - name: $1
    message: $2
    key: "$1:{tenant}"
    algorithm: concurrency
    limit: ${LIMIT:-2}
    lease: ${LEASE:-5m}
    id: "{id}"
    release: $2-done
YAML
}
{
	printf 'listen: 127.0.0.1:%s\nworkers: 1\n' "$A1"
	printf 'redis: { url: "redis://127.0.0.1:%s/0", timeout: 50ms }\n' "$RP"
	echo "rules:"
	conc open rl-open; echo "    fail: open"
	conc closed rl-closed; echo "    fail: closed"
	LIMIT=1 conc fl rl-fl; echo "    fail: local"
} >"$TMP/late.yaml"
{
	printf 'listen: 127.0.0.1:%s\nworkers: 1\n' "$A2"
	printf 'metrics: { listen: "127.0.0.1:%s" }\n' "$M2"
	printf 'redis: { url: "redis://127.0.0.1:%s/0", timeout: 1s }\n' "$RP"
	echo "processing_timeout: 2s"
	echo "rules:"
	LIMIT=5 conc vr rl-veto; echo "    fail: open"
	LIMIT=1 conc vl rl-veto; echo "    store: local"
} >"$TMP/veto.yaml"
{
	printf 'listen: 127.0.0.1:%s\nworkers: 1\n' "$A3"
	printf 'redis: { url: "redis://127.0.0.1:%s/0", timeout: 200ms }\n' "$RP"
	echo "processing_timeout: 250ms"
	echo "rules:"
	conc stall rl-stall; echo "    fail: open"
} >"$TMP/stall.yaml"
{
	printf 'listen: 127.0.0.1:%s\nworkers: 1\n' "$A4"
	printf 'metrics: { listen: "127.0.0.1:%s" }\n' "$M4"
	printf 'redis: { url: "redis://127.0.0.1:%s/0", timeout: 50ms }\n' "$RP"
	echo "rules:"
	LIMIT=20 conc dopen rl-dopen; echo "    fail: open"
	LIMIT=20 conc dclosed rl-dclosed; echo "    fail: closed"
	LIMIT=20 LEASE=2s conc dshort rl-dshort; echo "    fail: open"
} >"$TMP/drop.yaml"
AGENT_LOG=$TMP/agent1.log start_agent "$TMP/late.yaml"; P1=$AGENT_PID
AGENT_LOG=$TMP/agent2.log start_agent "$TMP/veto.yaml"
AGENT_LOG=$TMP/agent3.log start_agent "$TMP/stall.yaml"; P3=$AGENT_PID
{
	printf 'listen: 127.0.0.1:%s\nworkers: 1\n' "$A5"
	printf 'redis: { url: "redis://127.0.0.1:%s/0", timeout: 100ms }\n' "$RP"
	echo "processing_timeout: 1s"
	echo "plans: { free: { rate: 1000/s, burst: 1000 } }"
	echo "plan_lookup: { redis_hash: plans, default: free, cache: 60s }"
	echo "rules:"
	echo '  - { name: pt, message: rl-request, key: "pt:{tenant}", plan: rate, fail: open }'
	LIMIT=2 conc pc rl-pc; echo "    fail: open"
} >"$TMP/plan.yaml"
AGENT_LOG=$TMP/agent4.log start_agent "$TMP/drop.yaml"
AGENT_LOG=$TMP/agent5.log start_agent "$TMP/plan.yaml"; P5=$AGENT_PID
wait_port "$A1" && wait_port "$A2" && wait_port "$A3" && wait_port "$A4" &&
	wait_port "$A5"
ok $? "five agents up"

# ask PORT MESSAGE ID: one NOTIFY (tenant t1), prints its ACK line
ask() { "$CLIENT" -t 3000 -a "127.0.0.1:$1" "$2" tenant=s:t1 id=s:"$3" | grep '^ack'; }
# leases RULE: the members holding a lease of RULE for t1 in Redis
leases() { rc "$RP" zrange "rl:{$1:$1:t1}" 0 -1 | grep -v "^$" | sort | tr '\n' ' '; }
# late PORT MESSAGE ID: ask while Redis is stopped (resumed after 0.3 s)
late() {
	kill -STOP "$RPID"
	(sleep 0.3; kill -CONT "$RPID") &
	local resume=$!
	ask "$@"
	wait "$resume"
}
# settled CMD WANT: until CMD prints WANT (2 s at most)
is() { [ "$("$1" "$2")" = "$3" ]; }

# 1. fail: open. HAProxy sends rl-done only when the ACK set release.
out=$(late "$A1" rl-open a1)
echo "$out" | grep -q ' status=0 .*degraded=1'
ok $? "fail: open, Redis late: allowed, degraded ($out)"
echo "$out" | grep -q ' release=1'
ok $? "fail: open, Redis late: the ACK asks for the release"
echo "$out" | grep -q ' release=1' && ask "$A1" rl-open-done a1 >/dev/null
until_ok 20 is leases open ""
ok $? "fail: open, Redis late: rl-done frees the slot the late answer took (held: '$(leases open)')"

# 2. fail: closed: refused, so HAProxy sends nothing; the agent releases.
s1=$(late "$A1" rl-closed c1 | field status)
s2=$(late "$A1" rl-closed c2 | field status)
expect_eq "$s1 $s2" "503 503" "fail: closed, Redis late: 503 twice"
until_ok 20 is leases closed ""
ok $? "fail: closed, Redis late: the refused requests hold no lease (held: '$(leases closed)')"
expect_eq "$(ask "$A1" rl-closed c3 | field status)" 0 \
	"fail: closed: once Redis is back the tenant is not blocked"
ask "$A1" rl-closed-done c3 >/dev/null

# 3. Two requests pass the local peek while Redis is stopped; once it
# answers, the first takes the one local slot and the second is refused
# with its Redis lease granted: the agent releases that one.
kill -STOP "$RPID"
ask "$A2" rl-veto v1 >"$TMP/v1" &
c1=$!
ask "$A2" rl-veto v2 >"$TMP/v2" &
c2=$!
sleep 0.4
kill -CONT "$RPID"
wait "$c1" "$c2"
st=$(cat "$TMP/v1" "$TMP/v2" | field status | sort | tr '\n' ' ')
expect_eq "$st" "0 429 " "local veto after Redis: one allowed, one refused"
won=v1; grep -q ' status=0 ' "$TMP/v2" && won=v2
until_ok 20 is leases vr "$won "
ok $? "local veto after Redis: only the allowed request holds a Redis lease (held: '$(leases vr)', want '$won ')"
expect_eq "$(curl -s "127.0.0.1:$M2/metrics" |
	awk '$1 == "spoa_rl_lease_self_releases_total" { print $2 }')" 1 \
	"that release is counted: spoa_rl_lease_self_releases_total 1"

# 4. The agent stalls (SIGSTOP) between reading the NOTIFY and its
# deadline: its ACK comes after processing_timeout, which HAProxy has
# given up on (so no rl-done ever comes): the agent releases itself.
kill -STOP "$RPID"
ask "$A3" rl-stall s1 >"$TMP/s1" &
cpid=$!
sleep 0.1
kill -STOP "$P3"
sleep 0.5
kill -CONT "$P3"
sleep 0.1
kill -CONT "$RPID"
wait "$cpid"
grep -q ' status=0 ' "$TMP/s1"
ok $? "stalled agent: the late ACK allows ($(cat "$TMP/s1"))"
until_ok 20 is leases stall ""
ok $? "stalled agent: the lease HAProxy will not release is freed (held: '$(leases stall)')"

# 5. Releases go through an open breaker. After a second without an
# answer each timeout counts against the breaker; the fifth opens it, and
# the releases HAProxy sends next used to be refused at once (their fail
# mode skipped them): the leases taken late stayed.
kill -STOP "$RPID"
sleep 1.2
for id in b1 b2; do ask "$A1" rl-open "$id" >"$TMP/$id"; done
for id in x1 x2 x3; do ask "$A1" rl-closed "$id" >/dev/null; done
grep -q 'redis_breaker_open' "$TMP/agent1.log"
ok $? "five timeouts in a row open the breaker"
for id in b1 b2; do
	grep -q ' release=1' "$TMP/$id" && ask "$A1" rl-open-done "$id" >/dev/null
done
kill -CONT "$RPID"
until_ok 20 is leases open ""
ok $? "releases sent while the breaker is open still free the slots (held: '$(leases open)')"
until_ok 20 is leases closed ""
ok $? "and the refused requests' leases too (held: '$(leases closed)')"

# 6. fail: local: a lease taken while Redis was late is held in both tiers
# (the fallback's and, once the script ran, Redis'); its release, sent once
# Redis is back, used to reach Redis only, and the fallback's lease
# refused the next outage's request (limit 1) until it ran out.
out=$(late "$A1" rl-fl f1)
echo "$out" | grep -q ' status=0 .*release=1'
ok $? "fail: local, Redis late: allowed, release asked ($out)"
until_ok 20 is leases fl "f1 "
ok $? "fail: local, Redis late: the late script took the lease in Redis too"
ask "$A1" rl-fl-done f1 >/dev/null
until_ok 20 is leases fl ""
ok $? "fail: local: rl-done frees the Redis lease"
expect_eq "$(late "$A1" rl-fl f2 | field status)" 0 \
	"fail: local: and the fallback's, so the next outage's request passes"
ask "$A1" rl-fl-done f2 >/dev/null

# 7. Across a dropped link.
# stall_and_drop CMD: stops Redis, runs CMD, then sends 503s (rule
# dclosed, ids z1, z2...) until their timeouts drop the link: ten failed
# calls, the breaker's probes among them, past a second without a reply.
stall_and_drop() {
	kill -STOP "$RPID"
	"$@"
	sleep 1.1
	for i in $(seq 100); do
		grep -q redis_link_dropped "$TMP/agent4.log" && return 0
		ask "$A4" rl-dclosed "z$i" >/dev/null
		sleep 0.05
	done
	return 1
}
allow_two() { for id in k1 k2; do ask "$A4" rl-dopen "$id" >"$TMP/$id"; done; }
stall_and_drop allow_two
ok $? "timeouts past a second without a reply drop the link"
for id in k1 k2; do
	grep -q ' status=0 .*release=1' "$TMP/$id"
	ok $? "$id, allowed during the stall, asks for its release ($(cat "$TMP/$id"))"
	ask "$A4" rl-dopen-done "$id" >/dev/null
done
kill -CONT "$RPID"
until_ok 60 is leases dopen ""
ok $? "rl-done sent after the drop frees the slots the stale charges took (held: '$(leases dopen)')"
until_ok 60 is leases dclosed ""
ok $? "and so do the agent's own releases of the 503s (held: '$(leases dclosed)')"
MP=$M4
expect_eq "$(metric "$MP" spoa_rl_lease_releases_lost_total)" 0 "no release given up"

# 8. Redis stays stopped past the 2 s lease: the release is given up.
# Once Redis is back, the stale charge's lease ends on its own.
: >"$TMP/agent4.log"
allow_one() { ask "$A4" rl-dshort s1 >/dev/null; }
stall_and_drop allow_one
ask "$A4" rl-dshort-done s1 >/dev/null
until_ok 40 grep -q lease_release_lost "$TMP/agent4.log"
ok $? "a release unanswered at its lease's end is given up, with a warning"
expect_eq "$(metric "$MP" spoa_rl_lease_releases_lost_total)" 1 \
	"and counted: spoa_rl_lease_releases_lost_total 1"
kill -CONT "$RPID"
until_ok 40 is leases dshort ""
ok $? "the stale lease then ends with its lease (held: '$(leases dshort)')"
until_ok 60 is leases dclosed ""
ok $? "the 503s' own releases are retried meanwhile (held: '$(leases dclosed)')"
expect_eq "$(ask "$A4" rl-dopen k3 | field degraded)" 0 "Redis decides again"

# 9. The worker's first request (fresh from the pool).
kill -STOP "$RPID"
out=$("$CLIENT" -t 3000 -a "127.0.0.1:$A5" rl-pc-done tenant=s:t1 id=s:p1 \
	+ rl-request tenant=s:newtenant | grep '^ack')
kill -CONT "$RPID"
echo "$out" | grep -q ' status=0 .*degraded=1'
ok $? "a release next to a plan lookup out of time: answered, degraded ($out)"
kill -0 "$P5" 2>/dev/null
ok $? "and the agent is still running"

kill -0 "$P1" 2>/dev/null
ok $? "agent still running"
finish
