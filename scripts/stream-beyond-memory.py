#!/usr/bin/env python3
"""A stream larger than the memory `strata serve` may use: entries added, read back at random,
read through a consumer group and acknowledged, every value checked.

    scripts/memory-limit.sh 256 target/release/strata serve --dir D --port P \
        --block-cache-bytes 67108864 --cache-bytes 16777216 &
    python3 scripts/stream-beyond-memory.py P ENTRIES [VALUE_BYTES]

Entry i has the ID i-1 and the field `v` holding i written out and padded to VALUE_BYTES.
Prints each phase's rate; exits non-zero on any wrong answer.
"""
import random
import sys
import time

import redis

from beyond_memory import failer, padded, phase as timed

port, n = int(sys.argv[1]), int(sys.argv[2])
size = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
r = redis.Redis(port=port, protocol=2)


fail = failer("stream-beyond-memory")


def value(i):
    return padded(i, size)


def phase(name, count, started):
    timed(name, count, started, width=44)


r.delete("big")
started = time.time()
batch = 500
for lo in range(1, n + 1, batch):
    p = r.pipeline(transaction=False)
    for i in range(lo, min(lo + batch, n + 1)):
        p.xadd("big", {"v": value(i)}, id=f"{i}-1")
    p.execute()
phase(f"XADD of {size}-byte values, pipelined", n, started)
if r.xlen("big") != n:
    fail(f"XLEN {r.xlen('big')}, want {n}")

reads = min(n, 5000)
started = time.time()
rng = random.Random(7)
for _ in range(reads):
    i = rng.randint(1, max(1, n - 9))
    got = r.xrange("big", f"{i}-1", f"{i + 9}-1")
    want = [(f"{j}-1".encode(), {b"v": value(j)}) for j in range(i, min(i + 10, n + 1))]
    if got != want:
        fail(f"XRANGE from {i}: {got[:1]}...")
phase("XRANGE of 10 entries at random", reads, started)

r.xgroup_create("big", "g", id="0")
started = time.time()
seen = 0
while True:
    reply = r.xreadgroup("g", "c", {"big": ">"}, count=100)
    if not reply:
        break
    entries = reply[0][1]
    for entry_id, fields in entries:
        seen += 1
        if entry_id != f"{seen}-1".encode() or fields[b"v"] != value(seen):
            fail(f"XREADGROUP gave {entry_id} for entry {seen}")
phase("XREADGROUP COUNT 100, every entry", seen, started)
if seen != n:
    fail(f"XREADGROUP gave {seen} entries, want {n}")
if r.xpending("big", "g")["pending"] != n:
    fail(f"{r.xpending('big', 'g')['pending']} pending, want {n}")

started = time.time()
for lo in range(1, n + 1, batch):
    ids = [f"{i}-1" for i in range(lo, min(lo + batch, n + 1))]
    if r.xack("big", "g", *ids) != len(ids):
        fail(f"XACK from {lo} took fewer")
phase(f"XACK, {batch} IDs a call", n, started)
if r.xpending("big", "g")["pending"] != 0:
    fail("entries still pending after every XACK")
print(f"stream-beyond-memory: {n} entries of {size} bytes, every value checked")
