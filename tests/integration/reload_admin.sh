#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The admin API on the metrics listener (admin.listen = metrics.listen)
# across a reload that moves or removes metrics.listen: admin.listen holds
# until a restart, so the API must go on answering there. Before, the
# listener that carried it was closed with the old metrics address and the
# API was gone until a restart, silently.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); M1=$(port 3); M2=$(port 4)
start_redis "$RP"
TOKEN="reload-admin-token-$(date +%s)-abcdef"
printf '%s\n' "$TOKEN" >"$TMP/token"
policy() {	# METRICS-PORT (empty: none)
	cat <<YAML
listen: 127.0.0.1:$AP
workers: 1
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms }
processing_timeout: 1s
admin: { listen: "127.0.0.1:$M1", token_file: "$TMP/token" }
rules:
  - { name: login, message: rl-request, key: "u:{user}", rate: 2/h, burst: 2 }
YAML
	[ -n "$1" ] && echo "metrics: { listen: \"127.0.0.1:$1\" }"
}
admin_code() {	# PORT: the HTTP status of an admin GET there (000: none)
	curl -s -o /dev/null -w '%{http_code}' --max-time 2 \
		-H "Authorization: Bearer $TOKEN" \
		"http://127.0.0.1:$1/admin/keys/login?user=alice"
}
reloads=0
reload() {	# METRICS-PORT
	policy "$1" >"$TMP/policy.yaml"
	kill -HUP "$AGENT_PID"
	reloads=$((reloads + 1))
	until_ok 50 test "$(grep -c 'msg=reloaded' "$TMP/agent.log")" -ge "$reloads"
}
policy "$M1" >"$TMP/policy.yaml"
agent_up "$TMP/policy.yaml"
expect_eq "$(admin_code "$M1")" 200 "admin answers on the shared metrics listener"

reload "$M2"; ok $? "reload: metrics.listen moves"
until_ok 30 listening "127.0.0.1:$M2"; ok $? "metrics moved to the new address"
expect_eq "$(admin_code "$M1")" 200 "admin still answers on admin.listen after metrics moved"

reload "$M1"; ok $? "reload: metrics.listen back on admin.listen"
expect_eq "$(metric "$M1" spoa_rl_build_info)" 1 "metrics served on admin.listen again"
expect_eq "$(admin_code "$M1")" 200 "admin still answers there"
grep -q 'msg=metrics_failed' "$TMP/agent.log"; ok $((!$?)) "no metrics_failed"

reload ""; ok $? "reload: metrics.listen removed"
expect_eq "$(admin_code "$M1")" 200 "admin still answers after metrics.listen is removed"

kill -TERM "$AGENT_PID"; wait "$AGENT_PID"; expect_eq "$?" 0 "exit status 0"
finish
