#!/usr/bin/env python3
"""What the relay's producer probe costs a broker: a brokers-only Metadata request
(what `kafka/probe.rs` sends: an empty topic list) against the all-topics request it
replaced (a null topic list), on a broker with many topics.

    bench/probe_metadata.py HOST:PORT BROKER_PID [REQUESTS]
    bench/probe_metadata.py --create N HOST:PORT      N topics of 3 partitions first
                                                      (one CreateTopics v2 request)

Sends REQUESTS (default 200) of each kind over one connection, alternating in
blocks of 20, and prints per kind: response bytes, client wall time per request,
and the broker process's CPU time per request (utime + stime of /proc/PID/stat,
so run it on an otherwise idle broker). Metadata v1 (KIP-4: null = all topics,
[] = none); both kinds answer with the same broker list.
"""

import os
import socket
import struct
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def request(corr, all_topics):
    client = b"probe-bench"
    topics = struct.pack(">i", -1 if all_topics else 0)
    body = struct.pack(">hhih", 3, 1, corr, len(client)) + client + topics
    return struct.pack(">i", len(body)) + body


def read_exact(sock, n):
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise EOFError("broker closed the connection")
        out += chunk
    return bytes(out)


def string(text):
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def create_topics(address, count, partitions=3):
    """Create `count` topics `probe-bench-<i>` in one CreateTopics v2 request (v0-v1
    are gone since Kafka 4.0, KIP-896): topics [name, partitions, replication -1,
    no assignments, no configs], timeout 120 s, validate_only false."""
    host, port = address.rsplit(":", 1)
    topics = b"".join(
        string(f"probe-bench-{i}") + struct.pack(">ihii", partitions, -1, 0, 0)
        for i in range(count)
    )
    client = b"probe-bench"
    body = (struct.pack(">hhih", 19, 2, 1, len(client)) + client
            + struct.pack(">i", count) + topics + struct.pack(">ib", 120_000, 0))
    with socket.create_connection((host, int(port)), timeout=300) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        length = struct.unpack(">i", read_exact(sock, 4))[0]
        answer = read_exact(sock, length)
    # correlation id, throttle time, topic count, then [name, error code, message].
    at = 4 + 4
    (n,) = struct.unpack_from(">i", answer, at)
    at += 4
    errors = {}
    for _ in range(n):
        (size,) = struct.unpack_from(">h", answer, at)
        at += 2 + size
        (code,) = struct.unpack_from(">h", answer, at)
        at += 2
        (size,) = struct.unpack_from(">h", answer, at)
        at += 2 + max(size, 0)
        if code not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
            errors[code] = errors.get(code, 0) + 1
    if errors:
        sys.exit(f"CreateTopics failed: error codes {errors}")
    print(f"created {count} topics of {partitions} partitions")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def main():
    if sys.argv[1] == "--create":
        create_topics(sys.argv[3], int(sys.argv[2]))
        return
    host, port = sys.argv[1].rsplit(":", 1)
    pid = int(sys.argv[2])
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    sock = socket.create_connection((host, int(port)))
    stats = {True: [0, 0.0, 0.0, 0], False: [0, 0.0, 0.0, 0]}  # bytes, wall, cpu, count
    corr = 0
    for block in range(2 * n // 20):
        all_topics = block % 2 == 0
        cpu0, t0 = cpu_seconds(pid), time.perf_counter()
        size = 0
        for _ in range(20):
            corr += 1
            sock.sendall(request(corr, all_topics))
            length = struct.unpack(">i", read_exact(sock, 4))[0]
            read_exact(sock, length)
            size = length + 4
        s = stats[all_topics]
        s[0] = size
        s[1] += time.perf_counter() - t0
        s[2] += cpu_seconds(pid) - cpu0
        s[3] += 20
    for all_topics, label in ((True, "all topics (old probe)"), (False, "brokers only (probe)")):
        size, wall, cpu, count = stats[all_topics]
        print(f"{label:24} response {size:>9,} bytes  wall {wall / count * 1e3:8.3f} ms/request  "
              f"broker CPU {cpu / count * 1e3:8.3f} ms/request  ({count} requests)")
    old, new = stats[True], stats[False]
    print(f"ratio old/new: bytes {old[0] / new[0]:.0f}x, wall {old[1] / new[1]:.1f}x, "
          f"broker CPU {(old[2] / max(new[2], 1e-9)):.1f}x")


if __name__ == "__main__":
    main()
