#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# A +switch-master subscription that was confirmed, then hangs. Once the
# sentinel had confirmed the SUBSCRIBE, nothing more was asked of it: a
# sentinel stopped then (SIGSTOP, a frozen VM, a black hole keeping TCP
# up) kept the agent "subscribed" for good, and the failovers the other
# sentinels announced were missed until something else reconnected (the
# errors of a demoted master). Now the subscription is checked every
# second (the SUBSCRIBE sent again: its confirmation comes back on the
# subscribed connection) and a sentinel that does not confirm by the next
# check is dropped for the next one.
#
# Two sentinels: the one the agent subscribed to is stopped; the agent
# must notice, subscribe to the other, and hear the failover forced
# through it.
. "$(dirname "$0")/../lib.sh"
. "$(dirname "$0")/../e2e/lib-topo.bash"	# sentinel_group_up, sentinel_agent_up, ...
M=$(port 1); R=$(port 2); S1=$(port 3); S2=$(port 4); AP=$(port 5)
STOPPED=""
# a stopped sentinel is resumed before cleanup ends it
trap 'for p in $STOPPED; do kill -CONT "$p" 2>/dev/null; done; cleanup' EXIT

sentinel_group_up "$M" "$R" "$S1" "$S2"

sentinel_agent_up "127.0.0.1:$S1,127.0.0.1:$S2"
either() { subscribed_to "$S1" || subscribed_to "$S2"; }
until_ok 100 either; ok $? "the agent subscribes to a sentinel"
if subscribed_to "$S1"; then SUB=$S1; OTHER=$S2; else SUB=$S2; OTHER=$S1; fi
until_ok 50 counted_on "$M" before; ok $? "requests are counted on the master :$M"

pid=$(rc "$SUB" info server | tr -d '\r' | sed -n 's/^process_id://p')
[ -n "$pid" ] && kill -STOP "$pid" && STOPPED=$pid
ok $? "the subscribed sentinel :$SUB is stopped (TCP stays up)"
t0=$(now_ms)
noticed() { grep -q "msg=sentinel_timeout host=127.0.0.1 port=$SUB keepalive=1" "$TMP/agent.log"; }
until_ok 50 noticed; ok $? "the agent notices it within 5 s (took $(($(now_ms) - t0)) ms)"
until_ok 50 subscribed_to "$OTHER"; ok $? "... and subscribes to :$OTHER"

expect_eq "$(rc "$OTHER" sentinel failover mymaster)" OK "a failover forced through :$OTHER"
heard() { grep -q "msg=sentinel_switch_master master=mymaster host=127.0.0.1 port=$R" "$TMP/agent.log"; }
until_ok 150 heard; ok $? "the agent hears +switch-master to :$R"
until_ok 50 counted_on "$R" after; ok $? "requests are counted on the new master :$R"
kill -0 "$AGENT_PID"; ok $? "the agent is still running"
finish
