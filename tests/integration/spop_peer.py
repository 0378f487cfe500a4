#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# spop_peer.py: HAProxy's side of SPOP, misbehaving about its ACKs, for
# tests/integration/output_backpressure.sh and closing.sh. Over a unix socket PATH; each
# NOTIFY carries rl-request with tenant=s:bp and ip=10.0.0.1.
#
#   spop_peer.py never-read PATH CONNS HOLD_S
#       CONNS connections, each a HELLO (its AGENT-HELLO read), then
#       NOTIFYs for as long as any socket takes them, never reading; once
#       none has taken a byte for 2 s (30 s at most) prints
#       "stalled bytes=B" and holds them HOLD_S seconds.
#   spop_peer.py slow-reader PATH N PAUSE_S
#       One connection: a thread writes N NOTIFYs (stream-id i, frame-id
#       1, i = 1..N, as HAProxy 2.6 numbers them) while nothing is read
#       for PAUSE_S seconds; then the ACKs are read in small bites. Prints
#       "acks=A out_of_order=O other_frames=F sender_done=D": O counts the
#       ACKs whose stream-id is not the one after the previous ACK's.
#   spop_peer.py half-close PATH N WAIT_S
#       One connection: N NOTIFYs written at once (one write, so they fit
#       the socket's buffer whether or not the agent reads), then the write
#       side shut, then the ACKs read (WAIT_S at most between two reads).
#       Prints the same line as slow-reader.
import os
import socket
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from spop_wire import frame, name, read_varint, string, varint  # noqa: E402

HELLO = frame(1, 0, 0, name("supported-versions") + string("2.0")
              + name("max-frame-size") + b"\x03" + varint(16380)
              + name("capabilities") + string("pipelining"))


def notify(sid):
    return frame(3, sid, 1, name("rl-request") + b"\x02"
                 + name("tenant") + string("s:bp")
                 + name("ip") + b"\x06" + bytes([10, 0, 0, 1]))


def dial(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect(path)
    s.sendall(HELLO)
    n = struct.unpack(">I", s.recv(4, socket.MSG_WAITALL))[0]
    if s.recv(n, socket.MSG_WAITALL)[0] != 101:
        sys.exit("no AGENT-HELLO")
    return s


def never_read(path, conns, hold):
    socks = [dial(path) for _ in range(conns)]
    batch = notify(1) * 64
    sent = 0
    for s in socks:
        s.setblocking(False)
    last = time.time()
    end = last + 30
    while time.time() - last < 2 and time.time() < end:
        moved = False
        for s in socks:
            try:
                sent += s.send(batch)
                moved = True
            except OSError:  # EAGAIN, or the agent cut it off
                pass
        if moved:
            last = time.time()
        else:
            time.sleep(0.01)
    print("stalled bytes=%d" % sent, flush=True)
    time.sleep(hold)


def frames(buf):
    """Splits the whole frames off <buf>: (list of frames, the rest)."""
    out = []
    while len(buf) >= 4 and len(buf) >= 4 + struct.unpack(">I", buf[:4])[0]:
        n = struct.unpack(">I", buf[:4])[0]
        out.append(buf[4:4 + n])
        buf = buf[4 + n:]
    return out, buf


def read_acks(s, n, wait):
    """Reads ACKs from <s> until <n> came or EOF (<wait> s at most between
    two reads), in small bites: (acks, out of order, other frames)."""
    s.settimeout(wait)
    buf, want, bad, acks, other = b"", 1, 0, 0, 0
    try:
        while acks < n:
            chunk = s.recv(4096)
            if not chunk:
                break
            got, buf = frames(buf + chunk)
            for f in got:
                if f[0] != 103:  # ACK
                    other += 1
                    continue
                sid, _ = read_varint(f, 5)  # after type and flags
                acks += 1
                bad += sid != want
                want = sid + 1
            time.sleep(0.0005)
    except OSError:  # timeout, or the agent cut it off
        pass
    return acks, bad, other


def report(acks, bad, other, sender_done):
    print("acks=%d out_of_order=%d other_frames=%d sender_done=%d"
          % (acks, bad, other, sender_done), flush=True)


def slow_reader(path, n, pause):
    s = dial(path)
    s.settimeout(None)
    data = b"".join(notify(i) for i in range(1, n + 1))
    t = threading.Thread(target=s.sendall, args=(data,), daemon=True)
    t.start()
    time.sleep(pause)
    acks, bad, other = read_acks(s, n, 10)
    report(acks, bad, other, not t.is_alive())


def half_close(path, n, wait):
    s = dial(path)
    s.settimeout(wait)
    s.sendall(b"".join(notify(i) for i in range(1, n + 1)))
    s.shutdown(socket.SHUT_WR)
    acks, bad, other = read_acks(s, n, wait)
    report(acks, bad, other, 1)


MODES = {"never-read": never_read, "slow-reader": slow_reader,
         "half-close": half_close}

if __name__ == "__main__":
    MODES[sys.argv[1]](sys.argv[2], int(sys.argv[3]), float(sys.argv[4]))
