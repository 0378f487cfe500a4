# SPDX-License-Identifier: Apache-2.0
# `spoa-ratelimit top` prints the keys clients made (an arg read
# with url_dec can hold any byte): its text lines must escape them as the
# logs do, or a client forges lines in the operator's terminal.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); AM=$(port 3)
admin_on
redis_agent_up 1 100ms <<YAML
$ADMIN_YAML
rules:
  - { name: top, message: rl-top, key: "t:{user}", rate: 1/h, burst: 1 }
YAML
evil=$'mallory\n      9999  rl:{top:t:innocent-victim}'
timeout 10 "$CLIENT" -a "127.0.0.1:$AP" -n 5 rl-top "user=s:$evil" >/dev/null
seen() { timeout 10 "$AGENT" top -f "$TMP/policy.yaml" top >"$TMP/top.txt" 2>&1 && grep -q mallory "$TMP/top.txt"; }
until_ok 50 seen; ok $? "top lists the denied key"
sed 's/^/# | /' "$TMP/top.txt"
! grep -q '^ *9999  rl:' "$TMP/top.txt"
ok $? "no forged line (9999 denials of another key)"
expect_eq "$(grep -c '' "$TMP/top.txt")" 2 "one header line and one line per key"
finish
