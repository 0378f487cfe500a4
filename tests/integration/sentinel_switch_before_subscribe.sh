#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A failover announced while the agent moves its +switch-master
# subscription to the next sentinel. The agent subscribed to the next
# sentinel and then only listened: a +switch-master published before that
# sentinel confirmed the SUBSCRIBE was never heard, and the agent stayed on
# the demoted master until the errors of a request (READONLY) or the
# demotion's CLIENT KILL, seconds later, sent it to the sentinels. Now a
# new subscription also asks its sentinel for the master
# (get-master-addr-by-name) and switches, as a +switch-master would, when
# the answer is not the master the agent was given.
#
# The window is made wide and certain: the subscribed sentinel :S1 is
# killed, and the other one, :S2, forces a failover and then pauses its
# clients (CLIENT PAUSE ALL): its failover runs on, but the agent's
# SUBSCRIBE waits for the pause to end, after +switch-master is out. No
# request is sent until the agent has moved: a request would find the
# demoted master's READONLY and rediscover by that other way.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../e2e/lib-topo.bash"	# sentinel_group_up, sentinel_agent_up, ...
M=$(port 1); R=$(port 2); S1=$(port 3); S2=$(port 4); AP=$(port 5)
PAUSE_MS=4000

sentinel_group_up "$M" "$R" "$S1" "$S2"

sentinel_agent_up "127.0.0.1:$S1,127.0.0.1:$S2"
log_has() { grep -q "$1" "$TMP/agent.log"; }
until_ok 100 subscribed_to "$S1"; ok $? "the agent subscribes to the first sentinel :$S1"
until_ok 50 counted_on "$M" before; ok $? "requests are counted on the master :$M"

pid=$(rc "$S1" info server | tr -d '\r' | sed -n 's/^process_id://p')
[ -n "$pid" ] && kill -9 "$pid"; ok $? "the subscribed sentinel :$S1 is killed"
expect_eq "$(rc "$S2" sentinel failover mymaster)" OK "a failover forced through :$S2"
expect_eq "$(rc "$S2" client pause "$PAUSE_MS" ALL)" OK "... whose clients then wait ${PAUSE_MS} ms"
t0=$(now_ms)
announced() { grep -q "+switch-master mymaster 127.0.0.1 $M 127.0.0.1 $R" "$TMP/s$S2.log"; }
until_ok $((PAUSE_MS / 100 - 10)) announced
ok $? "+switch-master to :$R is announced ($(($(now_ms) - t0)) ms)"
! subscribed_to "$S2"; ok $? "... before the agent is subscribed to :$S2"
! log_has "msg=redis_connected host=127.0.0.1 port=$R"; ok $? "... so it is still on :$M"

until_ok 100 subscribed_to "$S2"; ok $? "the agent subscribes to :$S2 once the pause ends"
t1=$(now_ms)
on_new() { log_has "msg=redis_connected host=127.0.0.1 port=$R"; }
until_ok 30 on_new; ok $? "... and moves to :$R within 3 s, with no request ($(($(now_ms) - t1)) ms)"
is_master "$M"; ok $? "... while :$M was not demoted yet (its CLIENT KILL is not what moved it)"
log_has "msg=sentinel_switch_master master=mymaster host=127.0.0.1 port=$R"
ok $? "the move is logged as a switch of master"
until_ok 50 counted_on "$R" after; ok $? "requests are counted on the new master :$R"
kill -0 "$AGENT_PID"; ok $? "the agent is still running"
finish
