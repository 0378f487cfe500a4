#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Installs the Debian 12 packages spoa-ratelimit builds, tests and runs
# with, and only those that are missing. Needs root (or sudo) the first time.
set -e
PKGS="build-essential pkg-config clang clang-format libev-dev libhiredis-dev libyaml-dev
libcriterion-dev libmsgpack-dev redis-server redis-tools haproxy curl wrk
procps iproute2 prometheus docker-compose valgrind faketime"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "deps: installing$missing"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
