#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Writes the seed corpus of tests/fuzz/fuzz_spop.c: the LAB frames of
# shared/reference/SPOP.md 1.10 (HELLO, health-check HELLO, NOTIFY), an ACK
# with every action/data type, both DISCONNECTs, and a whole session as one
# stream. Run from the repository root; the output is committed.
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from spop_wire import frame, name, string, varint  # noqa: E402

OUT = "tests/fuzz/corpus-fuzz_spop"


hello = frame(1, 0, 0,
              name("supported-versions") + string("2.0")
              + name("max-frame-size") + b"\x03" + varint(16380)
              + name("capabilities") + string("pipelining,async")
              + name("engine-id") + string("3e4f9c2a-1b7d-4c85-9a0e-6f2d8b1c5e73"))
hc_hello = frame(1, 0, 0,
                 name("supported-versions") + string("2.0")
                 + name("max-frame-size") + b"\x03" + varint(16380)
                 + name("capabilities") + string("")
                 + name("healthcheck") + b"\x11")
notify = frame(3, 0, 1,
               name("rl-quota") + b"\x05"
               + name("tenant") + string("acme")
               + name("plan") + string("gold")
               + name("route") + string("/api/x")
               + name("method") + string("GET")
               + name("ip") + b"\x06\x7f\x00\x00\x01")
notify_types = frame(3, 264432, 2288,
                     name("all") + b"\x0a"
                     + b"\x00\x00" + b"\x00\x01" + b"\x00\x11"
                     + b"\x00\x02" + varint(2**64 - 5)
                     + b"\x00\x03" + varint(4000000000)
                     + b"\x00\x04" + varint(2**63)
                     + b"\x00\x05" + varint(2**64 - 1)
                     + b"\x00\x07" + bytes(range(16))
                     + b"\x00\x09" + name(b"\x00\xff")
                     + name("x") + string("y")
                     + name("second") + b"\x00")
ack = frame(103, 2, 1,
            b"\x01\x03\x02" + name("rl.action") + string("deny")
            + b"\x01\x03\x02" + name("rl.remaining") + b"\x04" + varint(41)
            + b"\x01\x03\x02" + name("rl.degraded") + b"\x01"
            + b"\x01\x03\x01" + name("ip") + b"\x06\x0a\x00\x00\x01"
            + b"\x02\x02\x02" + name("rl.reset"))
ha_discon = frame(2, 0, 0,
                  name("status-code") + b"\x03" + varint(2)
                  + name("message") + string("a timeout occurred"))
ag_discon = frame(102, 0, 0,
                  name("status-code") + b"\x03" + varint(0)
                  + name("message") + string("normal"))
agent_hello = frame(101, 0, 0,
                    name("version") + string("2.0")
                    + name("max-frame-size") + b"\x03" + varint(16380)
                    + name("capabilities") + string("pipelining"))

seeds = {
    "hello.bin": hello,
    "hc-hello.bin": hc_hello,
    "notify.bin": notify,
    "notify-all-types.bin": notify_types,
    "ack.bin": ack,
    "agent-hello.bin": agent_hello,
    "disconnect.bin": ha_discon + ag_discon,
    # A whole session. The fuzzer's second pass takes its small
    # max-frame-size from the first byte (x4) and parses the rest.
    "session.bin": hello + notify + notify_types + ha_discon,
}
os.makedirs(OUT, exist_ok=True)
for fname, data in seeds.items():
    with open(os.path.join(OUT, fname), "wb") as f:
        f.write(data)
assert len(hello) == 4 + 129 and len(hc_hello) == 4 + 78
