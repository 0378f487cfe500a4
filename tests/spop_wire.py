# SPDX-License-Identifier: Apache-2.0
# SPOP on the wire, for the Python test helpers (tests/fuzz/gen_corpus_spop.py,
# tests/integration/spop_peer.py): the encoding of shared/reference/SPOP.md
# (frames, varints, names, typed strings). It only builds bytes; the agent's
# own codec (agent/codec/spop.c) is what the tests check against.
import struct


def varint(x):
    """The "Peers" varint of doc/SPOE.txt (SPOP.md 1.2)."""
    if x < 240:
        return bytes([x])
    out = [(x | 0xF0) & 0xFF]
    x = (x - 240) >> 4
    while x >= 128:
        out.append((x | 0x80) & 0xFF)
        x = (x - 128) >> 7
    out.append(x)
    return bytes(out)


def read_varint(buf, off):
    """Decodes the varint at buf[off]: (value, offset after it)."""
    x = buf[off]
    off += 1
    if x < 240:
        return x, off
    shift = 4
    while True:
        b = buf[off]
        off += 1
        x += b << shift
        shift += 7
        if b < 128:
            return x, off


def name(s):
    """An untyped name (message, KV key): varint length and bytes."""
    s = s.encode() if isinstance(s, str) else s
    return varint(len(s)) + s


def string(s):
    """A typed STRING value."""
    return b"\x08" + name(s)


def frame(ftype, sid, fid, payload, flags=1):
    """A whole frame with its 4-byte length; FIN set by default."""
    body = bytes([ftype]) + struct.pack(">I", flags) + varint(sid) + varint(fid) + payload
    return struct.pack(">I", len(body)) + body
