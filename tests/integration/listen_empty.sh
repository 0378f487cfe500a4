#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A listen list with no address in it (-l "", -l ",": an unset variable
# in a unit's drop-in or a container's command line). The agent started,
# logged msg=started and listened nowhere: HAProxy could not reach it and
# nothing said why. Now startup fails (exit 1, startup_failed).
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2)
start_redis "$RP"
{
	policy_top "$AP" "redis://127.0.0.1:$RP/0" 100ms 1
	cat <<YAML
processing_timeout: 1s
rules:
  - { name: login, message: rl-request, key: "u:{user}", rate: 2/h, burst: 2 }
YAML
} >"$TMP/policy.yaml"
for l in "" "," " , "; do
	: >"$TMP/agent.log"
	timeout 5 "$AGENT" -f "$TMP/policy.yaml" -l "$l" >"$TMP/agent.log" 2>&1
	expect_eq "$?" 1 "-l '$l': exit status 1"
	grep -q 'msg=startup_failed' "$TMP/agent.log"; ok $? "-l '$l': startup_failed logged"
done
finish
