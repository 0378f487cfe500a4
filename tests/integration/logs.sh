#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Log filtering and protocol-error logs (issue 7, "Logs"): the level is
# the policy's log.level (info by default, re-read on SIGHUP) unless -v
# (debug) or -q (errors only) was given, which win. The probe is a
# health-check HELLO, which logs a debug line spop_healthcheck. A malformed
# frame is logged as level=warn msg=spop_error with the peer's address
# and port, and closes that connection only: a connection that was open
# next to it keeps being answered. Policy warnings and errors met at
# startup or on SIGHUP are log lines like any other (logfmt, leveled):
# only -c prints them bare, for a person.
. "$(dirname "$0")/../lib.sh"
if [ ! -x "$AGENT" ]; then
	ok 1 "agent binary $AGENT missing (build it first)"
	finish
fi
RP=$(port 0)
start_redis "$RP"

# policy FILE [LEVEL]: a one-rule policy, with log.level LEVEL if given.
policy() {
	cat >"$1" <<YAML
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms }
processing_timeout: 1s
rules:
  - name: tenant
    message: rl-request
    key: "tenant:{tenant}"
    algorithm: gcra
    rate: 100/min
    burst: 100
YAML
	[ -z "${2:-}" ] || printf 'log:\n  level: %s\n' "$2" >>"$1"
}

# agent NAME N POLICY [ARGS...]: an agent on port N with POLICY, logging
# to $TMP/agent-NAME.log; its pid in $PID_NAME. Waits until it listens.
agent() {
	name=$1; ap=$(port "$2"); pol=$3; shift 3
	AGENT_LOG="$TMP/agent-$name.log" agent_up "$pol" -l "127.0.0.1:$ap" "$@"
	eval "PID_$name=$AGENT_PID"
}

# probe N: a health-check HELLO to the agent on port N (a debug line).
probe() { "$CLIENT" -a "127.0.0.1:$(port "$1")" -H >/dev/null; }

# has NAME REGEX: does agent NAME's log hold a line matching REGEX?
has() { grep -Eq "$2" "$TMP/agent-$1.log"; }

# wait_log NAME REGEX: until agent NAME logs a line matching REGEX (2 s).
wait_log() {
	for i in $(seq 40); do has "$1" "$2" && return 0; sleep 0.05; done
	return 1
}

policy "$TMP/none.yaml"
policy "$TMP/warn.yaml" warn
policy "$TMP/debug.yaml" debug
cp "$TMP/none.yaml" "$TMP/def.yaml"
agent def 1 "$TMP/def.yaml"
agent v 2 "$TMP/none.yaml" -v
agent warn 3 "$TMP/warn.yaml"
agent warnv 4 "$TMP/warn.yaml" -v
agent debug 5 "$TMP/debug.yaml"
agent debugq 6 "$TMP/debug.yaml" -q
for n in 1 2 3 4 5 6; do probe $n; done

# ---- who logs what --------------------------------------------------------
wait_log def 'level=info msg=started '
ok $? "default (no log.level, no -v): the info line 'started' is logged"
! has def 'level=debug'
ok $? "default: no debug line, not even for a health check"
wait_log v 'level=debug msg=spop_healthcheck peer=127\.0\.0\.1:[0-9]+$'
ok $? "-v: the health check is logged at debug, with its peer"
has v 'level=info msg=started '; ok $? "-v: info lines still logged"
wait_log warnv 'level=debug msg=spop_healthcheck '
ok $? "-v over log.level warn: -v wins, the debug line is logged"
wait_log debug 'level=debug msg=spop_healthcheck '
ok $? "log.level debug: the debug line is logged without -v"
sleep 0.2
! has warn 'level=(info|debug)'
ok $? "log.level warn: no info line (not 'started', not 'policy_loaded'), no debug"
! has debugq 'level=(warn|info|debug)'
ok $? "-q over log.level debug: -q wins, nothing below error"

# log.level is re-read on SIGHUP
cp "$TMP/debug.yaml" "$TMP/def.yaml"
kill -HUP "$PID_def"
wait_log def 'msg=reloaded '; ok $? "default: SIGHUP reload logged"
probe 1
wait_log def 'level=debug msg=spop_healthcheck '
ok $? "a reload to log.level debug turns debug lines on"
cp "$TMP/warn.yaml" "$TMP/def.yaml"
kill -HUP "$PID_def"; sleep 0.3
n=$(grep -c 'msg=spop_healthcheck' "$TMP/agent-def.log")
probe 1; sleep 0.2
expect_eq "$(grep -c 'msg=spop_healthcheck' "$TMP/agent-def.log")" "$n" \
	"a reload to log.level warn turns them off again"
expect_eq "$(grep -c 'msg=reloaded' "$TMP/agent-def.log")" 1 \
	"and hides that reload's own info line"

# ---- policy warnings and errors are logfmt lines --------------------------
# logfmt NAME: every line of agent NAME's log is "ts=... level=... msg=...".
logfmt() { ! grep -Ev '^ts=[0-9T:.-]+Z level=(error|warn|info|debug) msg=[a-z_]+( |$)' "$TMP/agent-$1.log"; }
{ sed '/algorithm/,$d' "$TMP/none.yaml"
  printf '    algorithm: sliding-log\n    limit: 6000\n    window: 1h\n'; } >"$TMP/pw.yaml"
agent pw 7 "$TMP/pw.yaml"
wait_log pw 'msg=started '
has pw "level=warn msg=policy_warning detail=\"[^ ]*pw.yaml:[0-9]+:[0-9]+: rules\\[0\\]\\.limit: sliding-log"
ok $? "a policy warning at startup: level=warn msg=policy_warning with file:line:col and field"
printf '%s\n    burst: 0\n' "$(cat "$TMP/none.yaml")" | sed '/burst: 100/d' >"$TMP/pw.yaml"
kill -HUP "$PID_pw"
wait_log pw 'msg=reload_failed '; ok $? "a bad file on SIGHUP: reload_failed"
has pw 'level=error msg=policy_error detail="[^ ]*pw.yaml:[0-9]+:[0-9]+: rules\[0\]\.burst: must be'
ok $? "and its error as level=error msg=policy_error with file:line:col and field"
! has pw 'msg=policy_(error|warning) .*truncated=1'
ok $? "... whole, so no truncated=1"
# a report past 509 bytes (here it quotes a 600-byte key) is cut, and says so
sed "s/tenant:{tenant}/t:{$(head -c 600 /dev/zero | tr '\0' x)}/" "$TMP/none.yaml" >"$TMP/pw.yaml"
kill -HUP "$PID_pw"
until_ok 20 eval '[ "$(grep -c msg=reload_failed "$TMP/agent-pw.log")" -eq 2 ]'
has pw 'level=error msg=policy_error detail="[^ ]*pw.yaml:[0-9]+:[0-9]+: rules\[0\]\.key: .*x" truncated=1$'
ok $? "a policy error past 509 bytes: cut, and the line says so (truncated=1)"
logfmt pw; ok $? "every line of that log is logfmt"
logfmt def && logfmt v && logfmt warn; ok $? "every line of the other logs too"

# ---- a protocol error: logged with its peer, closes only its connection ----
# On the log.level warn agent: a warn line passes the filter that hid the
# info ones. A steady client (a NOTIFY every 150 ms) is connected before
# the malformed frame and must be served to the end.
AP=$(port 3)
"$CLIENT" -a "127.0.0.1:$AP" -n 8 -g 150 rl-request tenant=s:steady \
	>"$TMP/steady.out" 2>&1 &
steady=$!
sleep 0.3
exec 3<>"/dev/tcp/127.0.0.1/$AP"
# this socket's local port, via its inode in /proc/net/tcp
ino=$(readlink "/proc/$BASHPID/fd/3" | tr -dc 0-9)
lport=$(awk -v i="$ino" '$10 == i { split($2, a, ":"); print a[2] }' /proc/net/tcp)
lport=$((16#${lport:-0}))
printf '\0\0\0\0' >&3			# a zero-length frame, before any HELLO
timeout 2 od -An -tx1 <&3 | tr -d ' \n' >"$TMP/raw.out"
rc=${PIPESTATUS[0]}
exec 3<&-
expect_eq "$rc" 0 "the malformed connection is closed by the agent (EOF, not a timeout)"
grep -Eq '^[0-9a-f]{8}66' "$TMP/raw.out"
ok $? "after an AGENT-DISCONNECT frame (type 0x66; got $(head -c 24 "$TMP/raw.out"))"
wait_log warn "level=warn msg=spop_error peer=127\\.0\\.0\\.1:$lport status=[0-9]+ reason=\""
ok $? "spop_error is logged with the peer 127.0.0.1:$lport ($(grep spop_error "$TMP/agent-warn.log"))"
expect_eq "$(grep -c 'msg=spop_error' "$TMP/agent-warn.log")" 1 "exactly one spop_error line"
wait "$steady"
ok $? "the connection open next to it got every ACK"
expect_eq "$(grep -c '^ack.* status=0' "$TMP/steady.out")" 8 "all 8 of its NOTIFYs allowed"
! grep -q '^disconnect' "$TMP/steady.out"
ok $? "and no DISCONNECT on it"
# ---- client values in log lines are escaped, never raw -------------------
# A shadow rule's would-be denial logs its key (shadow_deny), and the key
# carries a client-supplied value: a newline in it must not start a forged
# line. The key is written as the sampled decision log writes it, bytes
# that are a space, a quote, a backslash or not printable ASCII as \xHH.
cat >"$TMP/shadow.yaml" <<YAML
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms }
processing_timeout: 1s
rules:
  - { name: sh, message: rl-request, key: "user:{user}", rate: 1/min, burst: 1, shadow: true }
YAML
agent shadow 8 "$TMP/shadow.yaml"
forged='ts=2000-01-01T00:00:00.000Z level=error msg=forged by=client'
"$CLIENT" -a "127.0.0.1:$(port 8)" -n 2 rl-request "user=s:eve"$'\n'"$forged" \
	>"$TMP/shadow.out"
expect_eq "$(field status <"$TMP/shadow.out" | tr '\n' ' ')" "0 0 " \
	"a shadow rule never denies (both requests allowed)"
wait_log shadow 'msg=shadow_deny '
ok $? "the second request's would-be denial is logged (shadow_deny)"
! grep -q '^ts=2000-01-01' "$TMP/agent-shadow.log"
ok $? "no forged line: the client's newline did not start a line of its own"
has shadow 'level=info msg=shadow_deny rule=sh key="rl:\{sh:user:eve\\x0ats=2000-01-01T00:00:00\.000Z\\x20level=error\\x20msg=forged\\x20by=client\}" remaining=0$'
ok $? "the key is escaped as in the decision log ($(grep shadow_deny "$TMP/agent-shadow.log" | head -n 1))"
# The same for the text of HAProxy's DISCONNECT (spop_disconnect): any
# peer of the SPOP port writes it.
"$CLIENT" -a "127.0.0.1:$(port 8)" -D "1:bye"$'\n'"$forged" rl-request user=s:x \
	>/dev/null 2>&1
wait_log shadow 'msg=spop_disconnect '
ok $? "the peer's DISCONNECT is logged (spop_disconnect)"
! grep -q '^ts=2000-01-01' "$TMP/agent-shadow.log"
ok $? "no forged line from the DISCONNECT's text"
has shadow 'msg=spop_disconnect .*message="bye\\x0ats=2000-01-01'
ok $? "its text is escaped ($(grep spop_disconnect "$TMP/agent-shadow.log" | head -n 1))"
# ---- a value cut to fit says so (truncated=1), one that fits does not ----
# shadow_deny keeps 120 bytes of the key, spop_disconnect 100 of the
# peer's words: past them the line ends with truncated=1, so a prefix is
# never read as the whole value.
! has shadow 'msg=shadow_deny .*truncated=1' && ! has shadow 'msg=spop_disconnect .*truncated=1'
ok $? "a key and a DISCONNECT text that fit: no truncated=1"
long=$(head -c 150 /dev/zero | tr '\0' u)
"$CLIENT" -a "127.0.0.1:$(port 8)" -n 2 rl-request "user=s:$long" >/dev/null
wait_log shadow "msg=shadow_deny rule=sh key=\"rl:\\{sh:user:u{108}\" remaining=0 truncated=1\$"
ok $? "a key past 120 bytes: cut there, and the line says so ($(grep "user:u" "$TMP/agent-shadow.log" | head -n 1 | cut -c 1-60)...)"
"$CLIENT" -a "127.0.0.1:$(port 8)" -D "3:$long" rl-request user=s:x >/dev/null 2>&1
wait_log shadow "msg=spop_disconnect .*status=3 message=\"u{100}\" suppressed=0 truncated=1\$"
ok $? "a DISCONNECT text past 100 bytes: cut there, and the line says so"
logfmt shadow; ok $? "every line of that log is logfmt"
finish
