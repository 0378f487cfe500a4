#!/bin/bash
# A rule in shadow mode is evaluated and reported, never enforced: past its
# burst requests still get 200, and txn.rl.shadow=1 shows in HAProxy's log
# line; an enforcing rule next to it still denies.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

cat >"$POLICY" <<EOF2
listen: 127.0.0.1:$AGENT_PORT
workers: 2
redis:
  url: redis://127.0.0.1:$REDIS_PORT/0
  timeout: 10ms
rules:
  - name: trial
    message: rl-request
    key: "trial:{tenant}"
    algorithm: gcra
    rate: 2/min
    burst: 2
    shadow: true
    missing: skip
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    rate: 5/min
    burst: 5
    missing: skip
EOF2
start_stack
ok $? "stack up, agent UP"

codes=""
for i in 1 2 3 4 5 6; do codes="$codes $(req -H 'X-Tenant: sh' "$URL/")"; done
expect_eq "$codes" " 200 200 200 200 200 429" "the shadow rule (burst 2) never denies; the enforcing one (burst 5) does"
expect_eq "$(grep -c 'rl_status=0 .*rl_shadow=1' "$TMP/haproxy.log")" 3 \
	"requests 3-5 are logged with rl_shadow=1 (the shadow rule would have denied)"
grep -q 'rl_status=0 .*rl_shadow=0' "$TMP/haproxy.log"
ok $? "requests 1-2 are logged with rl_shadow=0"

finish
