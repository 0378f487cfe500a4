#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# An address of redis+sentinel:// that is no sentinel of the URL's group
# (a plain Redis: sentinel_not_a_sentinel; a sentinel of other groups:
# sentinel_unknown_group) is logged at most once per 10 s per address. The
# interval was kept per worker, and every worker meets the same
# addresses: an agent of N workers logged N lines for each in each
# interval. Now the interval is the process's: one line per address
# whatever the workers.
#
# Two workers, the URL lists a plain Redis, then a sentinel of another
# group, then a sentinel of mymaster: both workers ask the first two and
# subscribe to the third, and each of the first two is named once. The
# interval's end (a line again, with suppressed=N) is test_oplog's.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../e2e/lib-topo.bash"	# start_sentinel, sentinel_agent_up, ...
M=$(port 1); P=$(port 2); O=$(port 3); SO=$(port 4); SG=$(port 5); AP=$(port 6)
WORKERS=2

start_redis "$M"
start_redis "$P"	# the plain Redis in the sentinels' list
start_redis "$O"	# the other group's master
start_sentinel "$SO" "$O" othergroup
start_sentinel "$SG" "$M"

sentinel_agent_up "127.0.0.1:$P,127.0.0.1:$SO,127.0.0.1:$SG" "$WORKERS"
subs() { grep -c "msg=sentinel_subscribed host=127.0.0.1 port=$SG" "$TMP/agent.log"; }
all_subscribed() { [ "$(subs)" = "$WORKERS" ]; }
until_ok 50 all_subscribed; ok $? "each of the $WORKERS workers subscribes to :$SG (got $(subs))"
until_ok 50 counted_on "$M" w; ok $? "requests are counted on the master :$M"

# each worker's subscription went :P, :SO, then :SG, asking each first;
# Redis counts the plain one's refusals (a sentinel has no command stats)
asked=$(errorstat "$P" ERR)
[ "$asked" -ge $((WORKERS + 1)) ]; ok $? "more than one worker asked the plain Redis :$P ($asked times)"

sleep 0.5	# a late worker's line would be out by now
expect_eq "$(grep -c "msg=sentinel_not_a_sentinel host=127.0.0.1 port=$P " "$TMP/agent.log")" 1 \
	"one sentinel_not_a_sentinel line for :$P, not one per worker"
expect_eq "$(grep -c "msg=sentinel_unknown_group host=127.0.0.1 port=$SO " "$TMP/agent.log")" 1 \
	"one sentinel_unknown_group line for :$SO, not one per worker"
kill -0 "$AGENT_PID"; ok $? "the agent is still running"
finish
