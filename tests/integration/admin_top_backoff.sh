# SPDX-License-Identifier: Apache-2.0
# When publishing the top lists fails (Redis gone), the agent waits
# ADMIN_BACKOFF_S (10 s) before it tries again, as OPERATING.md promises:
# each try is a blocking connect on the main loop, which also serves
# /metrics, the admin API and the workers' housekeeping.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); AM=$(port 3)
admin_on
redis_agent_up 1 100ms <<YAML
$ADMIN_YAML
rules:
  - { name: top, message: rl-top, key: "t:{user}", rate: 1/h, burst: 1 }
YAML
timeout 10 "$CLIENT" -a "127.0.0.1:$AP" -n 3 rl-top "user=s:mallory" >/dev/null
published() { [ "$(rc "$RP" exists 'rl:top:{top}')" = 1 ]; }
until_ok 50 published; ok $? "the agent publishes its top list"
eval "kill \$REDIS_PID_$RP"
failures() { grep -c 'admin_top_publish_failed' "$TMP/agent.log"; }
failed() { [ "$(failures)" -ge 1 ]; }
until_ok 50 failed; ok $? "a publish fails once Redis is gone"
sleep 5
expect_eq "$(failures)" 1 "no other try within 5 s of the failure"
start_redis "$RP"
until_ok 100 published; ok $? "it publishes again once the backoff is over"
finish
