#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# lib.sh's port blocks. Two suites of different worktrees run at once took
# the same block now and then (their bases came from their pids alone:
# "Address already in use"). Now each claims a block no running suite
# holds: two suites made to start from the same slot at once get two
# blocks, neither this suite's; a block where something listens is
# skipped; a suite started by a suite keeps its parent's PORT_BASE; and a
# block is free again once its suite has exited.
. "$(dirname "$0")/../lib.sh"
echo "# this suite's block: $PORT_BASE"

# A suite of its own: sources lib.sh, writes its PORT_BASE to $1.base,
# then holds its block until the file $2 exists (10 s at most).
cat >"$TMP/child.sh" <<CHILD
. "$ROOT/tests/lib.sh"
echo "\$PORT_BASE" >"\$1.tmp" && mv "\$1.tmp" "\$1.base"
until_ok 100 test -e "\$2"
CHILD

# child NAME [VAR=VALUE...]: child.sh in the background, with those
# variables and no inherited PORT_BASE (as run by hand or by
# run-suite.sh), until $TMP/release exists; its pid in CHILD_NAME.
child() {
	local name=$1
	shift
	env -u PORT_BASE "$@" bash "$TMP/child.sh" "$TMP/$name" \
		"$TMP/release" >"$TMP/$name.log" 2>&1 &
	PIDS="$PIDS $!"
	eval "CHILD_$name=$!"
}

# base NAME: the base child NAME claimed (5 s at most), "" if none.
base() {
	until_ok 50 test -s "$TMP/$1.base" && cat "$TMP/$1.base"
}

# slot BASE: the block's number
slot() { echo $((($1 - 20000) / 32)); }
me=$(slot "$PORT_BASE")

# Two at once, both told to start at this suite's slot.
child a PORT_SLOT0="$me"
child b PORT_SLOT0="$me"
A=$(base a)
B=$(base b)
[ -n "$A" ] && [ -n "$B" ]
ok $? "both suites claimed a block ($A, $B)"
[ "$A" != "$B" ]
ok $? "two suites claiming at once get two blocks"
[ "$A" != "$PORT_BASE" ] && [ "$B" != "$PORT_BASE" ]
ok $? "neither takes the block this suite holds ($PORT_BASE)"
[ $(((A - 20000) % 32)) -eq 0 ] && [ "$A" -ge 20000 ] &&
	[ $((A + 31)) -lt 32768 ]
ok $? "a block is 32 ports at 20000 + 32 * slot, below the ephemeral ports"

# A suite started by this one inherits PORT_BASE and claims nothing.
bash "$TMP/child.sh" "$TMP/inh" "$TMP/inh.release" >"$TMP/inh.log" 2>&1 &
PIDS="$PIDS $!"
expect_eq "$(base inh)" "$PORT_BASE" "a suite started by a suite keeps its base"
touch "$TMP/inh.release"

# A block where something listens is skipped, locked or not. The block is
# locked here first (fd 8), so the listener squats on no running suite's
# ports, then unlocked with the listener left on it (which must not
# inherit fd 8: it would hold the lock).
x=$(((me + 7) % PORT_SLOTS))
until port_lock 8 "$x"; do x=$(((x + 1) % PORT_SLOTS)); done
start_redis $((20000 + 32 * x + 5)) 8>&-
ok $? "a listener on port 5 of block $x ($((20000 + 32 * x)))"
exec 8>&-
child c PORT_SLOT0="$x"
C=$(base c)
[ -n "$C" ] && [ "$C" != $((20000 + 32 * x)) ]
ok $? "a block with a listener is skipped (got $C)"

# The lock goes with its suite.
touch "$TMP/release"
until_ok 50 eval '! kill -0 "$CHILD_a" 2>/dev/null'
ok $? "the suites exit once released"
flock -n "$PORT_LOCK_DIR/spoa-rl-ports.$(slot "$A").lock" true
ok $? "a block's lock is free once its suite has exited"
finish
