# SPDX-License-Identifier: Apache-2.0
# The admin API's 401s are logged at most once per 10 s, with the count
# of those not logged (suppressed=N), as the fail-mode lines are: a
# client hammering with bad tokens costs a few lines, not one per
# request, and cannot push the agent's other lines out of the log.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1); AP=$(port 2); AM=$(port 3)
admin_on
redis_agent_up 1 50ms <<YAML
$ADMIN_YAML
rules:
  - { name: login, message: rl-request, key: "u:{user}", rate: 1/h, burst: 1 }
YAML
until_ok 50 listening "127.0.0.1:$AM"; ok $? "the admin API listens"
# bad N: N requests with a wrong token each, from one curl (N processes
# took more than the 10 s interval on a busy machine); their status
# codes, counted
bad() {
	for i in $(seq 1 "$1"); do
		printf 'url = "http://127.0.0.1:%s/admin/keys/login?user=a"\n' "$AM"
		printf 'header = "Authorization: Bearer wrong-%s"\n' "$i"
		printf 'output = "/dev/null"\nwrite-out = "%%{http_code}\\n"\n'
		printf 'silent\nmax-time = 5\nnext\n'
	done >"$TMP/bad.curl"
	curl -K "$TMP/bad.curl" | sort | uniq -c | awk '{ print $2 "x" $1 }'
}
expect_eq "$(bad 200)" 401x200 "200 bad tokens: 200 answers 401"
expect_eq "$(grep -c 'action=auth' "$TMP/agent.log")" 1 "... logged once"
sleep 10.2
expect_eq "$(bad 1)" 401x1 "one more, 10 s later"
grep 'action=auth' "$TMP/agent.log" | tail -n 1 | grep -q 'result=unauthorized status=401 suppressed=199'
ok $? "... logged with the 199 not logged ($(grep 'action=auth' "$TMP/agent.log" | tail -n 1))"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 -H "Authorization: Bearer $TOKEN" \
	"http://127.0.0.1:$AM/admin/keys/login?user=a")
expect_eq "$code" 200 "the right token still works"
grep -q 'action=key_show rule=login key="rl:{login:u:a}" result=shown status=200' "$TMP/agent.log"
ok $? "... and every authorized action is still logged"
finish
