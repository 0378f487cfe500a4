#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# make install into a staging DESTDIR: the installed tree and modes, the
# unit's ExecStart rewritten for the prefix, nothing written outside
# DESTDIR/PREFIX, the man page renders without warnings, and
# systemd-analyze verify accepts the unit (skipped, saying why, when the
# command is missing). Then PREFIX=/usr puts the unit in /usr/lib.
. "$(dirname "$0")/../lib.sh"
cd "$ROOT" || exit 1

dest="$TMP/dest"
make -s install BUILD="$BUILD" DESTDIR="$dest" PREFIX=/usr/local \
	>"$TMP/install.log" 2>&1
rc=$?
ok $rc "make install DESTDIR=... PREFIX=/usr/local"
[ $rc -eq 0 ] || { cat "$TMP/install.log"; finish; }

p="$dest/usr/local"
for f in bin/spoa-ratelimit share/man/man8/spoa-ratelimit.8 \
	lib/systemd/system/spoa-ratelimit.service \
	share/doc/spoa-ratelimit/copyright share/doc/spoa-ratelimit/LICENSE; do
	[ -f "$p/$f" ]; ok $? "installed $f"
done
expect_eq "$(stat -c %a "$p/bin/spoa-ratelimit")" 755 "binary mode 755"
expect_eq "$(stat -c %a "$p/share/man/man8/spoa-ratelimit.8")" 644 "man page mode 644"
expect_eq "$(ls "$p/share/spoa-ratelimit/haproxy" | wc -l)" \
	"$(find haproxy -maxdepth 1 -type f | wc -l)" "all of haproxy/ installed"
expect_eq "$(ls "$p/share/spoa-ratelimit/policies" | wc -l)" \
	"$(ls policies/*.yaml 2>/dev/null | wc -l)" "all of policies/*.yaml installed"
expect_eq "$(ls "$p/share/spoa-ratelimit/grafana" | wc -l)" \
	"$(ls dist/grafana/*.json 2>/dev/null | wc -l)" \
	"all of dist/grafana/*.json installed"
expect_eq "$(ls "$dest")" usr "nothing outside PREFIX (no /etc)"
"$p/bin/spoa-ratelimit" --version >/dev/null 2>&1
ok $? "installed binary runs (--version)"

unit="$p/lib/systemd/system/spoa-ratelimit.service"
expect_eq "$(grep '^ExecStart=' "$unit")" \
	"ExecStart=/usr/local/bin/spoa-ratelimit -f /etc/spoa-ratelimit/policy.yaml -m 127.0.0.1:9465" \
	"unit ExecStart"

man8="$p/share/man/man8/spoa-ratelimit.8"
MANWIDTH=80 man -l "$man8" 2>/dev/null | grep -q '^SYNOPSIS'
ok $? "man -l renders the page"
expect_eq "$(groff -ww -man -z "$man8" 2>&1)" "" "groff -ww -man: no warnings"

if command -v systemd-analyze >/dev/null 2>&1; then
	# verify wants the ExecStart binary to exist: point the unit at the
	# staged one, and MANPATH at the staged man page (Documentation=).
	sed "s|/usr/local/bin/|$p/bin/|g" "$unit" > "$TMP/spoa-ratelimit.service"
	MANPATH="$p/share/man" systemd-analyze verify "$TMP/spoa-ratelimit.service" \
		>"$TMP/verify.log" 2>&1
	rc=$?
	[ $rc -eq 0 ] || cat "$TMP/verify.log"
	ok $rc "systemd-analyze verify"
else
	echo "skip - systemd-analyze verify: systemd-analyze is not installed"
fi

dest2="$TMP/dest2"
make -s install BUILD="$BUILD" DESTDIR="$dest2" PREFIX=/usr >"$TMP/install2.log" 2>&1
ok $? "make install PREFIX=/usr"
grep -q '^ExecStart=/usr/bin/spoa-ratelimit ' \
	"$dest2/usr/lib/systemd/system/spoa-ratelimit.service"
ok $? "PREFIX=/usr: unit in /usr/lib/systemd/system, ExecStart=/usr/bin"

sh scripts/install.sh "$TMP/dest3" relative/prefix "$p/bin/spoa-ratelimit" \
	>/dev/null 2>&1
expect_eq $? 2 "a relative PREFIX is refused"
finish
