#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# install.sh DESTDIR PREFIX BIN: what `make install` runs.
#
# Installs, under $DESTDIR (empty for a real install, a staging directory
# for packaging) and $PREFIX (default /usr/local):
#   $PREFIX/bin/spoa-ratelimit                      BIN, mode 755
#   $PREFIX/share/man/man8/spoa-ratelimit.8         dist/spoa-ratelimit.8
#   $PREFIX/share/spoa-ratelimit/haproxy/           haproxy/* (cfg, SPOE conf)
#   $PREFIX/share/spoa-ratelimit/policies/          policies/*.yaml
#   $PREFIX/share/spoa-ratelimit/grafana/           dist/grafana/*.json
#   $PREFIX/share/doc/spoa-ratelimit/               README.md, LICENSE, copyright, docs/*.md
#   $UNITDIR/spoa-ratelimit.service                 ExecStart -> $PREFIX/bin
# UNITDIR is $PREFIX/lib/systemd/system: /usr/local/lib/systemd/system for
# the default prefix and /usr/lib/systemd/system for PREFIX=/usr, both on
# systemd's search path; for another prefix systemd will not look there
# (link the unit into /etc/systemd/system). SYSTEMD_UNIT_DIR overrides it.
# /etc is never written: copy a policy to /etc/spoa-ratelimit/policy.yaml.
# POSIX sh; install(1) from coreutils.
set -eu

if [ $# -ne 3 ]; then
	echo "usage: $0 DESTDIR PREFIX BIN" >&2
	exit 2
fi
destdir=$1
prefix=${2:-/usr/local}
bin=$3
case $prefix in
/*) ;;
*) echo "install.sh: PREFIX must be an absolute path, not '$prefix'" >&2; exit 2 ;;
esac
prefix=${prefix%/}
[ -n "$prefix" ] || prefix=/
[ -x "$bin" ] || { echo "install.sh: no executable $bin (run make first)" >&2; exit 1; }
root=$(cd "$(dirname "$0")/.." && pwd)
unitdir=${SYSTEMD_UNIT_DIR:-$prefix/lib/systemd/system}
share=$prefix/share/spoa-ratelimit
doc=$prefix/share/doc/spoa-ratelimit

# copy_files MODE DIR FILE...: installs the FILEs that exist into DIR.
copy_files() {
	mode=$1; dir=$2; shift 2
	for f in "$@"; do
		[ -f "$f" ] || continue
		install -m "$mode" "$f" "$destdir$dir/"
		echo "  $dir/$(basename "$f")"
	done
}

echo "installing into ${destdir:-/} (prefix $prefix)"
install -d "$destdir$prefix/bin" "$destdir$prefix/share/man/man8" \
	"$destdir$share/haproxy" "$destdir$share/policies" \
	"$destdir$share/grafana" "$destdir$doc" \
	"$destdir$unitdir"
install -m 755 "$bin" "$destdir$prefix/bin/spoa-ratelimit"
echo "  $prefix/bin/spoa-ratelimit"
copy_files 644 "$prefix/share/man/man8" "$root/dist/spoa-ratelimit.8"
copy_files 644 "$share/haproxy" "$root"/haproxy/*
copy_files 644 "$share/policies" "$root"/policies/*.yaml
copy_files 644 "$share/grafana" "$root"/dist/grafana/*.json
copy_files 644 "$doc" "$root/README.md" "$root/LICENSE" "$root"/docs/*.md
# Debian keeps a package's licence as share/doc/PACKAGE/copyright.
install -m 644 "$root/LICENSE" "$destdir$doc/copyright"
echo "  $doc/copyright"

# The unit names the binary by absolute path: point it at this prefix.
sed -e "s|/usr/local/bin/spoa-ratelimit|$prefix/bin/spoa-ratelimit|g" \
	"$root/dist/spoa-ratelimit.service" > "$destdir$unitdir/spoa-ratelimit.service.tmp"
chmod 644 "$destdir$unitdir/spoa-ratelimit.service.tmp"
mv "$destdir$unitdir/spoa-ratelimit.service.tmp" "$destdir$unitdir/spoa-ratelimit.service"
echo "  $unitdir/spoa-ratelimit.service"

case $unitdir in
/etc/systemd/system | /usr/local/lib/systemd/system | /usr/lib/systemd/system | /lib/systemd/system) ;;
*) echo "note: systemd does not search $unitdir; link the unit into /etc/systemd/system" ;;
esac
if [ -z "$destdir" ] && [ ! -f /etc/spoa-ratelimit/policy.yaml ]; then
	echo "next: install -D -m 644 $share/policies/<one>.yaml /etc/spoa-ratelimit/policy.yaml"
	echo "      systemctl daemon-reload && systemctl enable --now spoa-ratelimit"
fi
