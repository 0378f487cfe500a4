# SPDX-License-Identifier: Apache-2.0
# The agent on redis+sentinel://: a master, a replica and three sentinels
# on loopback. Decisions work through the discovered master; after a
# SENTINEL failover, and again after the master is killed, decisions
# resume against the new master within a few seconds (degraded meanwhile
# per fail mode), and the limit keeps counting there.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../e2e/lib-topo.bash"	# start_sentinels, synced...
M=$(port 1); R=$(port 2); S1=$(port 3); S2=$(port 4); S3=$(port 5); AP=$(port 6)

start_redis "$M"
start_redis "$R"
rc "$R" replicaof 127.0.0.1 "$M" >/dev/null
until_ok 200 synced "$R"; ok $? "the replica syncs with the master"

start_sentinels "$M" "$S1" "$S2" "$S3"
until_ok 200 sentinel_sees_replica "$S1" "$R"; ok $? "the sentinels see the replica"
until_ok 200 sentinel_peers "$S1"; ok $? "the sentinels see each other"

cat >"$TMP/policy.yaml" <<YAML
listen: 127.0.0.1:$AP
workers: 2
redis: { url: "redis+sentinel://127.0.0.1:$S1,127.0.0.1:$S2,127.0.0.1:$S3/mymaster", timeout: 100ms }
processing_timeout: 1s
rules:
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    rate: 5/min
    burst: 5
    fail: open
  - name: login
    message: rl-login
    key: "login:{user}"
    algorithm: gcra
    rate: 1/min
    burst: 100
    fail: closed
YAML
agent_up "$TMP/policy.yaml"
c() { "$CLIENT" -a "127.0.0.1:$AP" "$@"; }
# healthy KEY: one rl-login decided by Redis (status 0, not degraded)
healthy() { [ "$(c rl-login user=s:"$1" | field status)/$(c rl-login user=s:"$1" | field degraded)" = "0/0" ]; }

until_ok 200 healthy probe0; ok $? "decisions come from the master found through the sentinels"
out=$(c -n 7 rl-request tenant=s:acme)
expect_eq "$(echo "$out" | field status | tr '\n' ' ')" "0 0 0 0 0 429 429 " \
	"the limit is enforced on the master (burst 5, then 429)"
expect_eq "$(rc "$M" exists 'rl:{tenant:tenant:acme}')" "1" "the key lives on the master"

# resumed NEWMASTER KEY: the new master has the role and a decision for
# KEY was made there by Redis (not degraded)
resumed() {
	rc "$1" role | head -1 | grep -q '^master$' || return 1
	o=$(c rl-login user=s:"$2")
	[ "$(echo "$o" | field degraded)" = 0 ] && [ "$(rc "$1" exists "rl:{login:login:$2}")" = 1 ]
}
# watch NEWMASTER: polls until decisions resume there; sets ELAPSED (ms),
# DEGRADED (fail-open degraded ACKs seen) and BAD (ACKs that were wrong)
watch() {
	t0=$(now_ms); DEGRADED=0; BAD=0; n=0
	while [ $n -lt 400 ]; do
		n=$((n + 1))
		o=$(c rl-request tenant=s:"w$n")
		case "$(echo "$o" | field status)/$(echo "$o" | field degraded)" in
		0/0) ;;
		0/1) DEGRADED=$((DEGRADED + 1)) ;;
		*) BAD=$((BAD + 1)) ;;
		esac
		o=$(c rl-login user=s:"wl$n")
		case "$(echo "$o" | field status)/$(echo "$o" | field degraded)" in
		0/0|503/1) ;;
		*) BAD=$((BAD + 1)) ;;
		esac
		resumed "$1" "k$n" && break
		sleep 0.05
	done
	ELAPSED=$(($(now_ms) - t0))
	[ $n -lt 400 ]
}

# 1. an orderly failover
expect_eq "$(rc "$S1" sentinel failover mymaster)" "OK" "SENTINEL failover is accepted"
watch "$R"; ok $? "decisions resume against the promoted replica (${ELAPSED} ms)"
echo "# failover: decisions resumed after ${ELAPSED} ms; degraded fail-open ACKs meanwhile: $DEGRADED"
expect_eq "$BAD" 0 "every ACK during the failover is a decision or its fail mode"
out=$(c -n 6 rl-request tenant=s:after1)
expect_eq "$(echo "$out" | field status | tr '\n' ' ')" "0 0 0 0 0 429 " \
	"the limit counts on the new master"
expect_eq "$(rc "$R" exists 'rl:{tenant:tenant:after1}')" "1" "the new key lives on the new master"
grep -q 'sentinel_switch_master' "$TMP/agent.log"; ok $? "+switch-master was received"

# 2. the master dies: the old master, now a replica, is promoted back
until_ok 200 synced "$M"; ok $? "the old master resyncs as a replica"
old_knows() { rc "$S2" sentinel replicas mymaster | grep -q "$M"; }
until_ok 200 old_knows; ok $? "the sentinels list the old master as a replica"
rpid=$(eval echo \$REDIS_PID_$R); kill -9 "$rpid"; wait "$rpid" 2>/dev/null
t_kill=$(now_ms)
o=$(c rl-login user=s:during)
case "$(echo "$o" | field status)/$(echo "$o" | field degraded)" in
503/1|0/0) ok 0 "fail: closed answers 503 degraded (or Redis) right after the kill" ;;
*) ok 1 "fail: closed right after the kill (got $(echo "$o" | tr '\n' ' '))" ;;
esac
watch "$M"; ok $? "decisions resume after the master is killed (${ELAPSED} ms)"
echo "# master killed: decisions resumed $(( $(now_ms) - t_kill )) ms after the kill (sentinel down-after 1000 ms); degraded fail-open ACKs: $DEGRADED"
expect_eq "$BAD" 0 "every ACK after the kill is a decision or its fail mode"
out=$(c -n 6 rl-request tenant=s:after2)
expect_eq "$(echo "$out" | field status | tr '\n' ' ')" "0 0 0 0 0 429 " \
	"the limit counts on the master promoted back"
finish
