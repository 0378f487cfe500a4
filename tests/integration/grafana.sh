#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The Grafana dashboards of dist/grafana/ query only what the agent
# exports. A real agent (Redis, a metrics listener) decides a few requests,
# so that its labelled counters and its histogram have values, and reloads
# once; its /metrics is scraped, and scripts/check-dashboard.py checks
# every dashboard's PromQL against that scrape (metric names exactly as
# sampled: a histogram as X_bucket/_sum/_count; rate() over counters;
# histogram_quantile by le; labels and label values that exist), and
# promtool (required, as in metrics.sh) parses every query. Both checks
# are shown to fail on broken copies of the dashboard first.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); MP=$(port 3)
CHECK="$ROOT/scripts/check-dashboard.py"
DASH="$ROOT/dist/grafana/spoa-ratelimit.json"
SCRAPE="$TMP/scrape.txt"
TENANT=grafana-tenant-7f3a

# check_dashboard DASHBOARD: the checker on DASHBOARD against $SCRAPE; its
# report in $TMP/check.out, its exit status returned.
check_dashboard() {
	python3 "$CHECK" "$1" "$SCRAPE" >"$TMP/check.out" 2>&1
}

# check_syntax DASHBOARD: promtool parses every query of DASHBOARD; its
# report in $TMP/promtool.out, its exit status returned.
check_syntax() {
	python3 "$CHECK" --rules "$1" >"$TMP/rules.yaml" &&
		promtool check rules "$TMP/rules.yaml" >"$TMP/promtool.out" 2>&1
}

# broken NAME SED-SCRIPT WANT: a copy of the dashboard edited by
# SED-SCRIPT must be rejected, with WANT in the checker's report.
broken() {
	sed "$2" "$DASH" >"$TMP/broken-$1.json"
	cmp -s "$DASH" "$TMP/broken-$1.json"
	[ $? -ne 0 ]; ok $? "broken copy $1: the edit changed the file"
	check_dashboard "$TMP/broken-$1.json"
	expect_eq $? 1 "broken copy $1: rejected"
	grep -qF -- "$3" "$TMP/check.out"
	ok $? "broken copy $1: the report says \"$3\""
}

redis_agent_up 1 1s <<YAML
metrics: { listen: "127.0.0.1:$MP" }
processing_timeout: 3s
rules:
  - { name: tenant, message: rl-request, key: "tenant:{tenant}",
      rate: 1/min, burst: 1 }
  - { name: preview, message: rl-preview, key: "preview:{tenant}",
      rate: 1/min, burst: 2, shadow: true }
YAML

# One allowed, then denials (some from the near-cache); a shadow rule's
# would-be denials on another connection; a reload.
conns0=$(metric "$MP" spoa_rl_spop_connections_total)
"$TOOLS/spop-client" -a "127.0.0.1:$AP" -n 40 -P 4 rl-request \
	tenant=s:$TENANT >"$TMP/out1"
"$TOOLS/spop-client" -a "127.0.0.1:$AP" -n 5 rl-preview \
	tenant=s:$TENANT >"$TMP/out2"
expect_eq "$(cat "$TMP"/out1 "$TMP"/out2 | grep -c '^ack')" 45 \
	"45 requests decided"
kill -HUP "$AGENT_PID"
until_ok 50 grep -q 'msg=reloaded' "$TMP/agent.log"; ok $? "reloaded"
curl -s --max-time 3 "http://127.0.0.1:$MP/metrics" >"$SCRAPE"
ok $? "scraped /metrics"

# The scrape has what the dashboard's panels draw.
val() {	# val SERIES: its value in the scrape, as an integer (-1: none)
	awk -v s="$1" '$1 == s { printf "%d", $2; f = 1 }
	               END { if (!f) print -1 }' "$SCRAPE"
}
dec() {	# dec RULE OUTCOME: the rule's decisions of that outcome
	val "spoa_rl_decisions_total{rule=\"$1\",outcome=\"$2\"}"
}
expect_eq "$(dec tenant allowed)" 1 "scrape: 1 decision tenant/allowed"
expect_eq "$(dec tenant denied)" 39 "scrape: 39 decisions tenant/denied"
expect_eq "$(dec preview shadow_denied)" 3 \
	"scrape: 3 decisions preview/shadow_denied"
[ "$(val spoa_rl_near_cache_hits_total)" -gt 0 ]
ok $? "scrape: near-cache hits"
[ "$(val 'spoa_rl_redis_request_duration_seconds_bucket{le="+Inf"}')" -gt 0 ]
ok $? "scrape: Redis latency histogram observed calls"
expect_eq "$(($(val spoa_rl_spop_connections_total) - conns0))" 2 \
	"scrape: 2 SPOP connections more"
expect_eq "$(val 'spoa_rl_policy_reloads_total{result="ok"}')" 1 \
	"scrape: 1 reload ok"
grep -q "$TENANT" "$SCRAPE"
[ $? -ne 0 ]; ok $? "scrape: the tenant is no label (keys never are)"

command -v promtool >/dev/null 2>&1
ok $? "promtool is installed (apt-get install prometheus; make deps)"

# The checker can fail: broken copies are rejected for the right reason.
broken name 's/spoa_rl_near_cache_hits_total/spoa_rl_near_cache_hitz_total/' \
	"metric spoa_rl_near_cache_hitz_total is not in the scrape"
H=spoa_rl_redis_request_duration_seconds
broken histogram "s/${H}_bucket/$H/" "metric $H is not in the scrape"
K=spoa_rl_local_keys
broken gauge_rate "s/($K{/(rate($K{/; s/\($K{[^}]*}\))/\1[5m]))/" \
	"rate()/increase() over $K, a gauge"
F=spoa_rl_spop_frames_total
broken raw_counter "s/rate($F\({[^}]*}\)\[\$__rate_interval\])/$F\1/" \
	"counter $F used without rate()/increase()"
broken quantile_le 's/sum by (instance, le)/sum by (instance)/' \
	"histogram_quantile without \`by (..., le)\`"
broken label 's/sum by (kind)/sum by (tenant)/' \
	"tenant is not a label of"
broken value 's/outcome=\\"denied\\"/outcome=\\"deny\\"/' \
	'spoa_rl_decisions_total{outcome="deny"}: no such value in the scrape'
broken variable 's/(spoa_rl_build_info, job)/(spoa_rl_buildinfo, job)/' \
	"metric spoa_rl_buildinfo is not in the scrape"
sed 's/sum by (kind) (/sum by (kind (/' "$DASH" >"$TMP/broken-syntax.json"
check_syntax "$TMP/broken-syntax.json"
ok $((! $?)) "broken copy syntax: promtool rejects it"
grep -q 'parse error' "$TMP/promtool.out"
ok $? "broken copy syntax: promtool says parse error"
printf '{"panels": [' >"$TMP/bad.json"
python3 "$CHECK" "$TMP/bad.json" "$SCRAPE" >/dev/null 2>&1
expect_eq $? 2 "a dashboard that is not JSON: exit status 2"

# The shipped dashboards: valid JSON, every query checked.
n=0
for d in "$ROOT"/dist/grafana/*.json; do
	[ -f "$d" ] || continue
	n=$((n + 1))
	python3 -m json.tool "$d" >/dev/null
	ok $? "$(basename "$d"): valid JSON"
	check_dashboard "$d"
	rc=$?
	[ $rc -eq 0 ] || cat "$TMP/check.out"
	ok $rc "$(basename "$d"): every query matches the scrape"
	check_syntax "$d"
	rc=$?
	[ $rc -eq 0 ] || cat "$TMP/promtool.out"
	ok $rc "$(basename "$d"): promtool parses every query"
done
[ $n -ge 1 ]; ok $? "dist/grafana holds a dashboard ($n)"

# Every family the agent exports is on the dashboard.
missing=""
for fam in $(awk '$1 == "#" && $2 == "TYPE" { print $3 }' "$SCRAPE"); do
	grep -q "\b$fam\(_bucket\|_sum\|_count\)\?\b" "$DASH" ||
		missing="$missing $fam"
done
expect_eq "$missing" "" "every exported metric family is on the dashboard"
finish
