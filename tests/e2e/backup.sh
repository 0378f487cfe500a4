#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A standby agent (RL_AGENT_BACKUP: server rl-backup ... backup) behind the
# shipped haproxy.cfg: it takes no traffic while the active agent is UP,
# and every request once the active agent is DOWN; decisions stay the
# agent's (rl_error=0), with the limits still counted in the shared Redis.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

BACKUP_PORT=$(port 5)
M1=$(port 6); MB=$(port 7)
export RL_AGENT_BACKUP="127.0.0.1:$BACKUP_PORT"
# 10/hour: the count must not refill while the kill is noticed, however
# long a loaded machine takes for it (10/min gave one back every 6 s).
write_policy 10 10/hour 50ms

notifies() { # PORT: NOTIFY frames that agent has seen
	curl -s --max-time 2 "http://127.0.0.1:$1/metrics" |
		awk '$1 == "spoa_rl_spop_frames_total{type=\"notify\"}" { print $2 + 0; f = 1 }
		     END { if (!f) print 0 }'
}
backup_state() {
	cli "show servers state be_spoa_rl" |
		awk '$2 == "be_spoa_rl" && $4 == "rl-backup" { print $6 }'
}

start_redis "$REDIS_PORT"
stack_agent "$POLICY" -m "127.0.0.1:$M1"
A1=$AGENT_PID
"$AGENT" -f "$POLICY" -l "127.0.0.1:$BACKUP_PORT" -m "127.0.0.1:$MB" \
	-r "redis://127.0.0.1:$REDIS_PORT/0" >>"$TMP/backup.log" 2>&1 &
PIDS="$PIDS $!"
wait_port "$AGENT_PORT" 10 && wait_port "$BACKUP_PORT" 10
"$HAPROXY" -c -q -f "$HAP_CFG"
ok $? "haproxy -c accepts the config with RL_AGENT_BACKUP"
start_haproxy "$HAP_CFG"
wait_port "$HAP_PORT" 10 && wait_port "$STATS_PORT" 5
wait_srv_state 2 10
ok $? "the active agent is UP"

codes=""
for i in 1 2 3 4 5; do codes="$codes $(req -H 'X-Tenant: t' "$URL/")"; done
expect_eq "$codes" " 200 200 200 200 200" "the active agent decides"
expect_eq "$(notifies "$MB")" 0 "the backup takes no traffic while the active agent is UP"

kill -9 "$A1"; wait "$A1" 2>/dev/null
wait_srv_state 0 10
ok $? "the active agent is marked DOWN"
codes=""
for i in 1 2 3 4 5 6; do codes="$codes $(req -H 'X-Tenant: t' "$URL/")"; done
expect_eq "$codes" " 200 200 200 200 200 429" \
	"the backup decides, on the same Redis count (10 of burst 10, then 429)"
[ "$(notifies "$MB")" -ge 6 ]
ok $? "the backup took the traffic ($(notifies "$MB") NOTIFYs)"
expect_eq "$(grep -c 'rl_error=[1-9]' "$TMP/haproxy.log")" 0 \
	"no request answered by HAProxy's error rule once the backup serves"
expect_eq "$(backup_state)" 2 "the backup is UP"
finish
