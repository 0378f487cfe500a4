#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# docker/: compose.yaml passes `docker compose config` (or Compose 1's
# `docker-compose config`, which scripts/deps.sh installs; with neither
# this test fails), and every file the Dockerfile and compose.yaml take
# from the repository exists. Building the image needs a Docker engine and
# is not done here.
. "$(dirname "$0")/../lib.sh"
cd "$ROOT" || exit 1

if docker compose version >/dev/null 2>&1; then
	compose="docker compose"
elif command -v docker-compose >/dev/null 2>&1; then
	compose=docker-compose
else
	compose=""
fi
if [ -n "$compose" ]; then
	$compose -f docker/compose.yaml config >"$TMP/compose.out" 2>&1
	rc=$?
	[ $rc -eq 0 ] || cat "$TMP/compose.out"
	ok $rc "$compose -f docker/compose.yaml config"
	grep -q 'redis://redis:6379/0' "$TMP/compose.out"
	ok $? "agents point at the redis service"
	expect_eq "$(grep -c 'dockerfile: docker/Dockerfile' "$TMP/compose.out")" 3 \
		"three agents built from docker/Dockerfile"
else
	ok 1 "compose config: neither the docker compose plugin nor docker-compose is installed (make deps)"
fi

for f in policies/example.yaml dist/spoa-ratelimit.8 haproxy/haproxy.cfg \
	haproxy/spoe-ratelimit.conf; do
	[ -f "$f" ]; ok $? "docker/ uses $f, which exists"
done
grep -q '^ENTRYPOINT \["/usr/local/bin/spoa-ratelimit"\]' docker/Dockerfile
ok $? "ENTRYPOINT execs the binary (signals reach it)"
grep -q '^HEALTHCHECK ' docker/Dockerfile &&
	grep -q '  CMD curl -fsS http://127.0.0.1:9465/healthz' docker/Dockerfile
ok $? "HEALTHCHECK on /healthz"
finish
