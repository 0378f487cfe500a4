#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A rule in shadow mode is evaluated and reported, never enforced: past its
# burst requests still get 200, and txn.rl.shadow=1 shows in HAProxy's log
# line; an enforcing rule next to it still denies.
# Then the global switch (top-level `shadow: true`, applied by SIGHUP):
# every rule is evaluated and reported, none denies. Past a burst of 3,
# 17 more requests of one tenant and 1 of another all get 200 with
# rl_shadow=1; spoa_rl_decisions_total counts exactly those 18 as
# shadow_denied (and 6 allowed, 0 denied); the agent logs shadow_deny once
# per key per window, so once per tenant, however HAProxy's connections
# are spread over the agent's 2 workers.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/lib-e2e.bash"
need_agent

MET_PORT=$(port 5)
# preamble: the top of both policies (2 workers, metrics on MET_PORT).
preamble() {
	policy_head 50ms	# under timeout processing 100ms; 10ms timed out on a loaded host
	cat <<EOF2
metrics:
  listen: "127.0.0.1:$MET_PORT"
EOF2
}
{ preamble; cat <<EOF2; } >"$POLICY"
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

# ---- the global switch ---------------------------------------------------
{ preamble; cat <<EOF2; } >"$POLICY"
shadow: true
rules:
  - name: global
    message: rl-request
    key: "global:{tenant}"
    algorithm: gcra
    rate: 3/min
    burst: 3
    missing: skip
EOF2
policy_valid "the global-shadow policy is valid"
kill -HUP "$AGENT_PID"
for i in $(seq 40); do grep -q 'msg=reloaded ' "$TMP/agent.log" && break; sleep 0.05; done
grep -q 'msg=reloaded ' "$TMP/agent.log"; ok $? "SIGHUP applied the global-shadow policy"
# the log lines of this phase only (HAProxy writes its stderr at its own
# offset, so the file is not truncated but read from here on)
hl=$(wc -l <"$TMP/haproxy.log")
since() { tail -n +$((hl + 1)) "$TMP/haproxy.log" | grep -ac "$1"; }
codes=""
for i in $(seq 20); do codes="$codes $(req -H 'X-Tenant: gs-a' "$URL/")"; done
for i in 1 2 3 4; do codes="$codes $(req -H 'X-Tenant: gs-b' "$URL/")"; done
expect_eq "$(echo $codes | tr ' ' '\n' | sort | uniq -c | tr -s ' ')" " 24 200" \
	"global shadow: 20 + 4 requests against a burst of 3 all get 200"
expect_eq "$(since 'rl_status=0 .*rl_shadow=1')" 18 \
	"the 18 beyond the burst (17 of gs-a, 1 of gs-b) are logged with rl_shadow=1"
expect_eq "$(since 'rl_status=0 .*rl_shadow=0')" 6 \
	"the 6 within it with rl_shadow=0"
expect_eq "$(metric "$MET_PORT" 'spoa_rl_decisions_total{rule="global",outcome="shadow_denied"}')" 18 \
	"decisions_total{rule=global,outcome=shadow_denied} is exactly the 18 would-be denials"
expect_eq "$(metric "$MET_PORT" 'spoa_rl_decisions_total{rule="global",outcome="allowed"}')" 6 \
	"decisions_total{rule=global,outcome=allowed} is 6"
expect_eq "$(metric "$MET_PORT" 'spoa_rl_decisions_total{rule="global",outcome="denied"}')" 0 \
	"decisions_total{rule=global,outcome=denied} is 0"
expect_eq "$(grep -c 'msg=shadow_deny rule=global ' "$TMP/agent.log")" 2 \
	"shadow_deny is logged once per key per window, whichever worker decides: twice for two tenants"
expect_eq "$(grep -c 'msg=shadow_deny rule=global key="[^"]*gs-a' "$TMP/agent.log")/$(grep -c 'msg=shadow_deny rule=global key="[^"]*gs-b' "$TMP/agent.log")" \
	"1/1" "one line for gs-a's 17 would-be denials, one for gs-b's 1"

finish
