#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The command line (issue 4 "Validation", issue 7 "--version and --help
# follow GNU conventions"): `-c -f FILE` reports each kind of error as
# file:line:col: field.path: message on stderr and exits 1, every error of
# a file and not just the first; a good file exits 0 with OK on stdout;
# a sliding-log limit above 5000 (POLICY_WARN_LOG_LIMIT) is warned about
# but still exits 0. --help and --version print on stdout and exit 0 (1
# when stdout cannot be written); a usage error says what on stderr,
# points at --help and exits 2. No Redis, no listening: -c only reads.
. "$(dirname "$0")/../lib.sh"
if [ ! -x "$AGENT" ]; then
	ok 1 "agent binary $AGENT missing (build it first)"
	finish
fi

# good: a valid one-rule policy; the error cases below edit one line of it,
# so their line numbers are those shown here.
good() {
	cat <<'EOF'
listen: 127.0.0.1:1
rules:
  - name: a
    message: rl-request
    key: "t:{tenant}"
    algorithm: gcra
    rate: 5/min
    burst: 5
EOF
}

# check FILE: runs -c -f FILE; status in $rc, stdout in $TMP/out,
# stderr in $TMP/err.
check() {
	"$AGENT" -c -f "$1" >"$TMP/out" 2>"$TMP/err"
	rc=$?
}

# bad NAME WHERE: $TMP/bad.yaml is refused with exit 1 and an error
# starting "$TMP/bad.yaml:WHERE" (line:col: field.path:).
bad() {
	check "$TMP/bad.yaml"
	expect_eq "$rc" 1 "$1: exit 1"
	grep -qF "$TMP/bad.yaml:$2" "$TMP/err"
	ok $? "$1: reported as file:$2 ($(head -c 200 "$TMP/err" | tr '\n' ' '))"
}

# ---- -c on good files --------------------------------------------------------
good >"$TMP/good.yaml"
check "$TMP/good.yaml"
expect_eq "$rc" 0 "a good file: exit 0"
expect_eq "$(cat "$TMP/out")" "$TMP/good.yaml: OK (1 rules)" "a good file: OK and the rule count on stdout"
expect_eq "$(cat "$TMP/err")" "" "a good file: nothing on stderr"

# ---- -c on each kind of error ------------------------------------------------
{ good; echo "    bogus: 1"; } >"$TMP/bad.yaml"
bad "unknown key" "9:5: rules[0].bogus: unknown key"
good | sed 's/burst: 5/burst: five/' >"$TMP/bad.yaml"
bad "wrong type" '8:12: rules[0].burst: expected an integer, got "five"'
good | sed 's/burst: 5/burst: 0/' >"$TMP/bad.yaml"
bad "burst 0" "8:12: rules[0].burst: must be between 1 and"
good | sed 's|rate: 5/min|rate: 0/min|' >"$TMP/bad.yaml"
bad "rate 0" "7:11: rules[0].rate: rate must be > 0"
{ good; good | sed -n '3,$p'; } >"$TMP/bad.yaml"
bad "duplicate rule names" '9:11: rules[1].name: duplicate rule name "a" (first at line 3)'
{ good; printf 'plans:\n  free: { rate: 1/s, burst: 1 }\ntenants:\n  acme: gold\n'; } >"$TMP/bad.yaml"
bad "unknown plan of a tenant" '12:9: tenants.acme: unknown plan "gold"'
{ good; printf 'plans:\n  free: { rate: 1/s, burst: 1 }\nplan_lookup:\n  default: gold\n'; } >"$TMP/bad.yaml"
bad "unknown default plan" '12:12: plan_lookup.default: unknown plan "gold"'
good | sed 's/{tenant}/{}/' >"$TMP/bad.yaml"
bad "a template naming no arg ({})" "5:10: rules[0].key: empty placeholder {}"
good | sed 's|{tenant}|{/64}|' >"$TMP/bad.yaml"
bad "a template naming no arg ({/64})" "5:10: rules[0].key: placeholder has no arg name"
{ good; printf 'redis: { timeout: 500ms }\n'; } >"$TMP/bad.yaml"
bad "redis.timeout over the default processing_timeout (100ms)" \
	"9:19: redis.timeout: redis.timeout (500ms) must stay below processing_timeout"
{ good; printf 'redis: { timeout: 50ms }\nprocessing_timeout: 50ms\n'; } >"$TMP/bad.yaml"
bad "redis.timeout equal to processing_timeout" "9:19: redis.timeout: "
{ good; printf 'redis: { timeout: 500ms }\nprocessing_timeout: 1s\n'; } >"$TMP/bad.yaml"
check "$TMP/bad.yaml"
expect_eq "$rc" 0 "redis.timeout below processing_timeout: accepted"
printf 'rules: [ { name: x\n' >"$TMP/bad.yaml"
bad "a YAML syntax error" "2:1: yaml: "

# every error of a file, in file order, not only the first
{ good | sed 's/burst: 5/burst: 0/'; echo "    bogus: 1"; } >"$TMP/bad.yaml"
check "$TMP/bad.yaml"
expect_eq "$rc" 1 "two errors: exit 1"
expect_eq "$(sed 's/: .*//' "$TMP/err" | tr '\n' ' ')" \
	"$TMP/bad.yaml:8:12 $TMP/bad.yaml:9:5 " "two errors: both reported, in line order"
expect_eq "$(cat "$TMP/out")" "" "two errors: no OK on stdout"

check "$TMP/nonexistent.yaml"
expect_eq "$rc" 1 "a missing file: exit 1"
grep -qF "$TMP/nonexistent.yaml" "$TMP/err" && grep -q 'cannot open' "$TMP/err"
ok $? "a missing file: its path and 'cannot open' on stderr ($(cat "$TMP/err"))"

# ---- the sliding-log warning -------------------------------------------------
# sliding_log LIMIT: a policy with one sliding-log rule of LIMIT per hour.
sliding_log() {
	good | sed '6,$d'
	printf '    algorithm: sliding-log\n    limit: %s\n    window: 1h\n' "$1"
}
sliding_log 6000 >"$TMP/sl.yaml"
check "$TMP/sl.yaml"
expect_eq "$rc" 0 "sliding-log limit 6000: still valid, exit 0"
grep -qF "$TMP/sl.yaml:7:12: rules[0].limit: sliding-log keeps one entry per request: limit 6000" "$TMP/err"
ok $? "sliding-log limit 6000: warned at file:7:12 rules[0].limit ($(cat "$TMP/err"))"
grep -q 'OK (1 rules)' "$TMP/out"; ok $? "sliding-log limit 6000: OK on stdout"
sliding_log 5000 >"$TMP/sl.yaml"
check "$TMP/sl.yaml"
expect_eq "$rc/$(cat "$TMP/err")" "0/" "sliding-log limit 5000: exit 0, no warning"

# ---- the largest sliding window -------------------------------------------
# Limit 2^32 and window 2^48 µs are the most -c accepts, and the exact
# sliding window's maths hold there in C and in the script (test_limiter
# and test_script: sliding_window_largest_limit_and_window_*); one more of
# either is refused.
sliding_window() {
	good | sed '6,$d'
	printf '    algorithm: sliding-window\n    limit: %s\n' "$1"
	printf '    window: %s\n' "$2"
}
sliding_window 4294967296 281474976710656us >"$TMP/sw.yaml"
check "$TMP/sw.yaml"
expect_eq "$rc/$(cat "$TMP/err")" "0/" "sliding-window limit 2^32, window 2^48 us: accepted"
sliding_window 4294967297 281474976710656us >"$TMP/bad.yaml"
bad "sliding-window limit 2^32 + 1" "7:12: rules[0]: rate/limit too large"
sliding_window 4294967296 281474976710657us >"$TMP/bad.yaml"
bad "sliding-window window 2^48 + 1 us" "8:13: rules[0].window: expected a duration"

# ---- --help and --version ----------------------------------------------------
for h in --help -h; do
	"$AGENT" $h >"$TMP/out" 2>"$TMP/err"
	expect_eq "$?" 0 "$h: exit 0"
	head -n 1 "$TMP/out" | grep -q '^Usage: spoa-ratelimit \[OPTION\]'
	ok $? "$h: a GNU usage line first on stdout"
	expect_eq "$(cat "$TMP/err")" "" "$h: nothing on stderr"
done
for o in '-V, --version' '-h, --help' '-c, --check' '-f, --policy' '-v, --verbose'; do
	grep -qe "^ *$o" "$TMP/out"; ok $? "--help lists $o"
done
for sub in 'key show|reset' 'top' 'override set|del|list'; do
	grep -qF "spoa-ratelimit $sub" "$TMP/out"; ok $? "--help names the $sub subcommand"
done
"$AGENT" override --help >"$TMP/out" 2>"$TMP/err"
expect_eq "$?" 0 "override --help: exit 0"
grep -q '^usage: spoa-ratelimit override set -f POLICY' "$TMP/out"
ok $? "override --help: its usage on stdout"
"$AGENT" override >/dev/null 2>"$TMP/err"
expect_eq "$?" 2 "override alone: a usage error"
grep -q '^usage: spoa-ratelimit override' "$TMP/err"; ok $? "override alone: its usage on stderr"
"$AGENT" --help >/dev/full 2>"$TMP/err"
expect_eq "$?" 1 "--help to a full stdout: exit 1"
grep -q 'write error' "$TMP/err"; ok $? "--help to a full stdout: says so on stderr"

for v in --version -V; do
	"$AGENT" $v >"$TMP/out" 2>"$TMP/err"
	expect_eq "$?" 0 "$v: exit 0"
	head -n 1 "$TMP/out" | grep -Eq '^spoa-ratelimit [0-9]+\.[0-9]+\.[0-9]+'
	ok $? "$v: name and version on the first line ($(head -n 1 "$TMP/out"))"
	expect_eq "$(cat "$TMP/err")" "" "$v: nothing on stderr"
	grep -q '^License: Apache-2.0' "$TMP/out"; ok $? "$v: names the licence"
done
# every source file carries its licence as an SPDX line
missing=$(cd "$ROOT" && git ls-files 'agent/*.[ch]' 'agent/*.lua' 'tests/*.c' \
	'tests/*.sh' 'scripts/*.sh' 2>/dev/null | while read -r f; do
	grep -q 'SPDX-License-Identifier: Apache-2.0' "$f" || echo "$f"; done)
expect_eq "$missing" "" "every source file has an SPDX-License-Identifier line"

# ---- usage errors ------------------------------------------------------------
# usage NAME ARGS...: exit 2, nothing on stdout, the complaint and a
# pointer to --help on stderr.
usage() {
	name=$1; shift
	"$AGENT" "$@" >"$TMP/out" 2>"$TMP/err"
	expect_eq "$?" 2 "$name: exit 2"
	expect_eq "$(cat "$TMP/out")" "" "$name: nothing on stdout"
	grep -q "Try 'spoa-ratelimit --help'" "$TMP/err"
	ok $? "$name: points at --help on stderr"
}
usage "an unknown long option" --bogus
grep -q 'bogus' "$TMP/err"; ok $? "an unknown long option: named on stderr"
usage "an unknown short option" -Z
grep -q "'Z'" "$TMP/err"; ok $? "an unknown short option: named on stderr"
usage "a stray argument" -c -f "$TMP/good.yaml" extra
grep -q "unexpected argument 'extra'" "$TMP/err"; ok $? "a stray argument: named on stderr"
usage "-w out of range" -w 0 -c -f "$TMP/good.yaml"
usage "-f without its file" -f
finish
