#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# tests/tools/redis-paced, the naive design's load in make bench: it must
# send what it says at the rate it is given, one command per request, with
# "__rand_int__" made a key below -k, and count Redis' error replies, so
# that the bench divides by the calls Redis really ran.
. "$(dirname "$0")/../lib.sh"
RP=$(port 1)
PACED="$TOOLS/redis-paced"
start_redis "$RP"

# 2,000/s for 2 s on 4 connections: 4,000 SETs, each its own call
t0=$(now_ms)
out=$("$PACED" -p "$RP" -c 4 -R 2000 -d 2 -k 50 -- SET 'k:__rand_int__' v)
t1=$(now_ms)
echo "# $out"
sent=$(echo " $out" | field sent)
expect_eq "$sent" 4000 "2,000/s for 2 s sends 4,000 commands"
expect_eq "$(echo " $out" | field replies)" 4000 "every command is answered and counted"
expect_eq "$(echo " $out" | field errors)" 0 "SET replies are not counted as errors"
calls=$(rc "$RP" info commandstats | tr -d '\r' | sed -n 's/^cmdstat_set:calls=\([0-9]*\),.*/\1/p')
expect_eq "$calls" 4000 "Redis ran one call per request (commandstats)"
[ $((t1 - t0)) -ge 1900 ] && [ $((t1 - t0)) -lt 6000 ]
ok $? "the run is paced: 2 s of sending, not a burst ($((t1 - t0)) ms)"
n=$(rc "$RP" dbsize)
[ "$n" -gt 40 ] && [ "$n" -le 50 ]
ok $? "__rand_int__ spreads the keys over -k 50 ($n keys)"
expect_eq "$(rc "$RP" exists 'k:__rand_int__')" 0 "no key keeps the literal placeholder"

# an error reply is an answer, counted as an error
out=$("$PACED" -p "$RP" -c 2 -R 500 -d 1 -- NOSUCHCOMMAND x)
expect_eq "$(echo " $out" | field errors)" "$(echo " $out" | field replies)" \
	"every error reply is counted"
[ "$(echo " $out" | field errors)" -ge 450 ]
ok $? "500/s for 1 s got about 500 error replies"

# nothing listening: a clear message and a failed exit, at once
dead=$(port 2)
err=$(timeout 5 "$PACED" -p "$dead" -R 100 -d 1 -- PING 2>&1 >/dev/null)
rcode=$?
[ "$rcode" -eq 1 ] && echo "$err" | grep -q "127.0.0.1:$dead"
ok $? "no Redis: exit 1 with the address in the message ($rcode: $err)"
timeout 5 "$PACED" -p "$RP" -R 0 -- PING >/dev/null 2>&1
expect_eq $? 2 "a rate of 0 is refused as usage"
long="k:$(printf '%0120d' 0):__rand_int__"
err=$(timeout 5 "$PACED" -p "$RP" -R 100 -d 1 -- SET "$long" v 2>&1 >/dev/null)
rcode=$?
[ "$rcode" -eq 2 ] && echo "$err" | grep -q 'over'
ok $? "an argument too long to take the key is refused, not sent unchanged ($rcode: $err)"
finish
