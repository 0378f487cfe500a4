#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Unix-socket listeners never take a path over from a live instance:
#   1. a second agent on the path of a live one refuses to start (a clear
#      error, exit status non-zero), and the first one goes on answering,
#      its socket file still there once the second is gone;
#   2. a stale socket file (its agent killed -9) is replaced;
#   3. a file that is no socket is left alone, and the agent refuses;
#   4. at stop, an agent removes the path only if it is still the socket
#      it bound: one that another instance put there since is kept.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1)
SOCK="$TMP/ux.sock"
start_redis "$RP"
cat >"$TMP/policy.yaml" <<YAML
listen: unix:$SOCK
workers: 1
redis: { url: "redis://127.0.0.1:$RP/0", timeout: 100ms }
processing_timeout: 1s
rules: []
YAML
answers() { "$TOOLS/spop-client" -a "unix:$SOCK" -H -t 1000 >/dev/null 2>&1; }
exited() { ! kill -0 "$1" 2>/dev/null; }
# status PID: PID's exit status once it has exited (5 s at most), else it
# is killed and the status is 255.
status() {
	until_ok 50 exited "$1" || { kill -9 "$1"; wait "$1"; return 255; }
	wait "$1"
}

AGENT_LOG="$TMP/agent-a.log" start_agent "$TMP/policy.yaml"; A=$AGENT_PID
until_ok 50 answers; ok $? "agent A listens on unix:$SOCK"

AGENT_LOG="$TMP/agent-b.log" start_agent "$TMP/policy.yaml"; B=$AGENT_PID
status "$B"; rcb=$?
[ "$rcb" -ne 0 ] && [ "$rcb" -ne 255 ]
ok $? "agent B, on the same path, exits non-zero at once ($rcb)"
grep -q 'startup_failed.*in use' "$TMP/agent-b.log"
ok $? "agent B says the path is in use"
[ -S "$SOCK" ]; ok $? "the socket file is still there after B's exit"
answers; ok $? "agent A still answers on it"

kill -9 "$A"; status "$A"
[ -S "$SOCK" ]; ok $? "agent A killed -9 leaves a stale socket file"
AGENT_LOG="$TMP/agent-c.log" start_agent "$TMP/policy.yaml"; C=$AGENT_PID
until_ok 50 answers; ok $? "agent C replaces the stale socket and answers"
grep -q 'stale_socket_removed' "$TMP/agent-c.log"; ok $? "and logs it"

# 4: C's socket is removed behind its back and D takes the path; C's
# stop must not remove D's socket.
rm -f "$SOCK"
AGENT_LOG="$TMP/agent-d.log" start_agent "$TMP/policy.yaml"; D=$AGENT_PID
until_ok 50 answers; ok $? "agent D listens on the path C lost"
kill "$C"
status "$C"; expect_eq $? 0 "agent C stops"
[ -S "$SOCK" ] && answers
ok $? "C's stop leaves D's socket in place, and D answers"
grep -q 'socket_not_removed' "$TMP/agent-c.log"; ok $? "C logs that it left it"
kill "$D"
status "$D"
[ ! -e "$SOCK" ]; ok $? "D's stop removes its own socket"

echo "not a socket" >"$SOCK"
AGENT_LOG="$TMP/agent-e.log" start_agent "$TMP/policy.yaml"; E=$AGENT_PID
status "$E"; rce=$?
[ "$rce" -ne 0 ] && [ "$rce" -ne 255 ] && grep -q 'not a socket' "$TMP/agent-e.log"
ok $? "a file that is no socket: the agent refuses ($rce)"
expect_eq "$(cat "$SOCK")" "not a socket" "and leaves the file alone"
finish
