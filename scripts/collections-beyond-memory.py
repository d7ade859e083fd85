#!/usr/bin/env python3
"""A sorted set and a hash larger than the memory `strata serve` may use: members and fields
added, then read back at random, every answer checked.

    scripts/memory-limit.sh 128 target/release/strata serve --dir D --port P \
        --write-buffer-size 8388608 --block-cache-bytes 16777216 --cache-bytes 4194304 &
    python3 scripts/collections-beyond-memory.py P MEMBERS [VALUE_BYTES]

Member i of the sorted set `zbig` is `m` and i's 64-bit multiplicative hash in hex, with
score i: the member index is written in random order, the score index in order. Field i of
the hash `hbig` has the same name and the value i written out and padded to VALUE_BYTES.
Prints each phase's rate and, after each load, the bytes of the server's tables (`INFO lsm`
sst_bytes); exits non-zero on any wrong answer.
"""
import random
import sys
import time

import redis

from beyond_memory import failer, padded, phase

port, n = int(sys.argv[1]), int(sys.argv[2])
size = int(sys.argv[3]) if len(sys.argv) > 3 else 100
r = redis.Redis(port=port, protocol=2)
PER_CALL = 1000
READS = min(n, 5000)


def name(i):
    return b"m%016x" % ((i * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF)


fail = failer("collections-beyond-memory")


def value(i):
    return padded(i, size)


def table_bytes(after):
    """Prints the bytes the server's tables and memtable hold (a server without `INFO lsm`,
    such as redis-server, prints nothing)."""
    info = r.info("lsm")
    if "sst_bytes" in info:
        print(f"tables after {after}: {info['sst_bytes']} bytes, "
              f"memtable {info['memtable_bytes']} bytes")


def add_all(command):
    """Sends `command(pipeline, lo, hi)` for every slice of PER_CALL, 20 calls a round trip."""
    for lo in range(0, n, PER_CALL * 20):
        p = r.pipeline(transaction=False)
        for start in range(lo, min(lo + PER_CALL * 20, n), PER_CALL):
            command(p, start, min(start + PER_CALL, n))
        for added in p.execute():
            if added != PER_CALL and added != n % PER_CALL:
                fail(f"a call added {added} elements")


r.delete("zbig", "hbig")
started = time.time()
add_all(lambda p, lo, hi: p.zadd("zbig", {name(i): i for i in range(lo, hi)}))
phase(f"ZADD, {PER_CALL} members a call", n, started)
table_bytes("the sorted set")
if r.zcard("zbig") != n:
    fail(f"ZCARD {r.zcard('zbig')}, want {n}")

rng = random.Random(7)
started = time.time()
for _ in range(READS):
    i = rng.randrange(n)
    got = r.zscore("zbig", name(i))
    if got != float(i):
        fail(f"ZSCORE of member {i}: {got}")
phase("ZSCORE of a member at random", READS, started)

started = time.time()
for k in range(READS):
    got = r.zrange("zbig", 0, 9) if k % 2 == 0 else r.zrange("zbig", -10, -1)
    want = [name(j) for j in (range(10) if k % 2 == 0 else range(n - 10, n)) if 0 <= j < n]
    if got != want:
        fail(f"ZRANGE of the first or last ten: {got[:1]}...")
phase("ZRANGE of the first ten or the last ten by rank", READS, started)

# Ten members from a score at random, up and down.
for label, read, step in [
    ("ZRANGEBYSCORE", lambda i: r.zrangebyscore("zbig", i, "+inf", start=0, num=10), 1),
    ("ZREVRANGEBYSCORE", lambda i: r.zrevrangebyscore("zbig", i, "-inf", start=0, num=10), -1),
]:
    started = time.time()
    for _ in range(READS):
        i = rng.randrange(n)
        want = [name(j) for j in range(i, i + 10 * step, step) if 0 <= j < n]
        if read(i) != want:
            fail(f"{label} from {i}: {read(i)[:1]}...")
    phase(f"{label} from a score at random, LIMIT 10", READS, started)

started = time.time()
add_all(lambda p, lo, hi: p.hset("hbig", mapping={name(i): value(i) for i in range(lo, hi)}))
phase(f"HSET of {size}-byte values, {PER_CALL} fields a call", n, started)
table_bytes("the sorted set and the hash")
if r.hlen("hbig") != n:
    fail(f"HLEN {r.hlen('hbig')}, want {n}")

started = time.time()
for _ in range(READS):
    i = rng.randrange(n)
    got = r.hget("hbig", name(i))
    if got != value(i):
        fail(f"HGET of field {i}: {got[:20] if got else got}")
phase("HGET of a field at random", READS, started)

started = time.time()
for _ in range(READS):
    i = rng.randrange(n)
    missing = b"x" + name(i)[1:]
    if r.hget("hbig", missing) is not None or r.zscore("zbig", missing) is not None:
        fail(f"a field never written was found: {missing}")
phase("HGET and ZSCORE of a name never written", READS, started)

started = time.time()
counts = {}
for _ in range(READS):
    i = rng.randrange(n)
    counts[i] = counts.get(i, 0) + 1
    if r.hincrby("hcount", name(i), 1) != counts[i]:
        fail(f"HINCRBY of field {i} gave another count than {counts[i]}")
phase("HINCRBY of a field at random (a second hash)", READS, started)
print(f"collections-beyond-memory: a sorted set and a hash of {n} elements each, "
      f"{size}-byte values, every answer checked")
