"""The same operations from Python on Strata, plyvel (LevelDB) and rocksdict (RocksDB), in one
process, in interleaved rounds: each round runs every engine once, in a rotated order.

    crates/strata-py/bench/run.sh [--num 1000000] [--rounds 3] [--csv out.csv]

Workloads (16-byte keys, 100-byte values, writes without sync):
  fillrandom   N puts of distinct keys in random order, into an empty database
  fillseq      N puts of keys in ascending order, into an empty database
  readrandom   N gets of random existing keys, after fillrandom (one thread)
  readrandom4  N gets split over 4 threads, same database
  scan         one full forward scan of the fillrandom database
  fillbatch    --batches write batches (100,000) of --batch-size puts (100), ascending keys

Every engine gets the same settings: a 64 MiB write buffer, an 8 MiB block cache, Bloom
filters of 10 bits per key and no compression, and compacts its whole range after fillrandom,
before the reads. Each run checks from the engine's own files
that they hold uncompressed data (their table bytes are at least the bytes of the values),
and every workload checks what it read: the number of values found and their bytes.
"""

import argparse
import csv
import os
import random
import shutil
import statistics
import sys
import tempfile
import threading
import time

KEY_BYTES = 16
VALUE_BYTES = 100
WRITE_BUFFER = 64 << 20
CACHE = 8 << 20
BLOOM_BITS = 10


class Engine:
    name = ""

    def __init__(self, path):
        self.path = path

    def table_bytes(self):
        total = 0
        for root, _, files in os.walk(self.path):
            for f in files:
                if f.endswith((".sst", ".ldb")):
                    total += os.path.getsize(os.path.join(root, f))
        return total


class PlyvelLike(Engine):
    """Strata's binding and plyvel share an API: write batches as context managers,
    ``iterator()``, ``compact_range()`` and ``close()``."""

    def batch(self, items):
        with self.db.write_batch() as wb:
            put = wb.put
            for k, v in items:
                put(k, v)

    def scan(self):
        return self.db.iterator()

    def settle(self):
        self.db.compact_range()

    def close(self):
        self.db.close()


class Strata(PlyvelLike):
    name = "strata"

    def __init__(self, path):
        super().__init__(path)
        import strata

        self.db = strata.DB(path, write_buffer_size=WRITE_BUFFER, cache_size=CACHE,
                            bloom_bits=BLOOM_BITS, compression=None)
        self.put = self.db.put
        self.get = self.db.get


class Plyvel(PlyvelLike):
    name = "plyvel"

    def __init__(self, path):
        super().__init__(path)
        import plyvel

        self.db = plyvel.DB(path, create_if_missing=True, write_buffer_size=WRITE_BUFFER,
                            lru_cache_size=CACHE, bloom_filter_bits=BLOOM_BITS,
                            compression=None)
        self.put = self.db.put
        self.get = self.db.get


class RocksDict(Engine):
    name = "rocksdict"

    def __init__(self, path):
        super().__init__(path)
        from rocksdict import BlockBasedOptions, Cache, DBCompressionType, Options, Rdict

        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_write_buffer_size(WRITE_BUFFER)
        opts.set_compression_type(DBCompressionType.none())
        table = BlockBasedOptions()
        table.set_block_cache(Cache(CACHE))
        table.set_bloom_filter(BLOOM_BITS, False)
        opts.set_block_based_table_factory(table)
        self.db = Rdict(path, opts)
        self.put = self.db.put
        self.get = self.db.get
        from rocksdict import WriteBatch

        self.WriteBatch = WriteBatch

    def batch(self, items):
        wb = self.WriteBatch(raw_mode=True)
        put = wb.put
        for k, v in items:
            put(k, v)
        self.db.write(wb)

    def scan(self):
        return self.db.items()

    def settle(self):
        self.db.compact_range(None, None)

    def close(self):
        self.db.close()


ENGINES = {e.name: e for e in (Strata, Plyvel, RocksDict)}


def keys_of(order):
    return [b"%016d" % i for i in order]


def values(count=1024):
    rng = random.Random(99)
    return [bytes(rng.randrange(256) for _ in range(VALUE_BYTES)) for _ in range(count)]


def fill(engine, keys, vals):
    put = engine.put
    start = time.perf_counter()
    for i, k in enumerate(keys):
        put(k, vals[i & 1023])
    return time.perf_counter() - start


def read(engine, keys):
    get = engine.get
    start = time.perf_counter()
    found = 0
    for k in keys:
        if get(k) is not None:
            found += 1
    return time.perf_counter() - start, found


def read_threads(engine, keys, threads):
    parts = [keys[t::threads] for t in range(threads)]
    found = [0] * threads
    barrier = threading.Barrier(threads + 1)

    def run(t):
        get = engine.get
        barrier.wait()
        n = 0
        for k in parts[t]:
            if get(k) is not None:
                n += 1
        found[t] = n

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    start = time.perf_counter()
    for w in workers:
        w.join()
    return time.perf_counter() - start, sum(found)


def scan(engine):
    start = time.perf_counter()
    n = 0
    nbytes = 0
    for k, v in engine.scan():
        n += 1
        nbytes += len(v)
    return time.perf_counter() - start, n, nbytes


def fill_batches(engine, batches, size, vals):
    start = time.perf_counter()
    for b in range(batches):
        base = b * size
        engine.batch([(b"%016d" % (base + i), vals[(base + i) & 1023]) for i in range(size)])
    return time.perf_counter() - start


def check(cond, message):
    if not cond:
        sys.exit(f"check failed: {message}")


def one_round(name, args, root, vals, order, lookups):
    n = args.num
    rows = {}
    path = os.path.join(root, f"{name}-random")
    engine = ENGINES[name](path)
    rows["fillrandom"] = n / fill(engine, keys_of(order), vals)
    # Every engine compacts its whole range before the reads (LevelDB has no flush call but
    # this one), so that each reads a settled tree.
    engine.settle()
    tables = engine.table_bytes()
    # Uncompressed tables hold at least every value's bytes; compressed ones would not, as
    # 1,024 distinct values repeat.
    check(tables >= n * VALUE_BYTES, f"{name} wrote {tables} table bytes for {n} values: compressed?")
    elapsed, found = read(engine, lookups)
    check(found == len(lookups), f"{name} readrandom found {found} of {len(lookups)}")
    rows["readrandom"] = len(lookups) / elapsed
    elapsed, found = read_threads(engine, lookups, args.threads)
    check(found == len(lookups), f"{name} readrandom{args.threads} found {found}")
    rows[f"readrandom{args.threads}"] = len(lookups) / elapsed
    elapsed, count, nbytes = scan(engine)
    check(count == n and nbytes == n * VALUE_BYTES, f"{name} scan saw {count} entries, {nbytes} bytes")
    rows["scan"] = n / elapsed
    engine.close()
    shutil.rmtree(path)

    path = os.path.join(root, f"{name}-seq")
    engine = ENGINES[name](path)
    rows["fillseq"] = n / fill(engine, keys_of(range(n)), vals)
    engine.close()
    shutil.rmtree(path)

    path = os.path.join(root, f"{name}-batch")
    engine = ENGINES[name](path)
    elapsed = fill_batches(engine, args.batches, args.batch_size, vals)
    rows["fillbatch"] = args.batches * args.batch_size / elapsed
    check(engine.get(b"%016d" % (args.batches * args.batch_size - 1)) is not None, "last batch")
    engine.close()
    shutil.rmtree(path)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--num", type=int, default=1_000_000)
    p.add_argument("--batches", type=int, default=100_000)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--threads", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--engines", default="strata,plyvel,rocksdict")
    p.add_argument("--dir", default=None, help="where the databases go (a temporary directory)")
    p.add_argument("--csv", default=None, help="write every round's figures here")
    args = p.parse_args()

    names = args.engines.split(",")
    for name in names:
        check(name in ENGINES, f"unknown engine {name}")
    root = tempfile.mkdtemp(prefix="strata-py-bench-", dir=args.dir)
    vals = values()
    rng = random.Random(1)
    order = list(range(args.num))
    rng.shuffle(order)
    lookups = keys_of(rng.randrange(args.num) for _ in range(args.num))
    results = {name: [] for name in names}
    try:
        for r in range(args.rounds):
            turn = names[r % len(names):] + names[:r % len(names)]
            for name in turn:
                rows = one_round(name, args, root, vals, order, lookups)
                results[name].append(rows)
                print(f"round {r + 1} {name:10s} " + "  ".join(f"{k} {v:,.0f}/s" for k, v in rows.items()), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    workloads = list(results[names[0]][0])
    median = {name: {w: statistics.median(r[w] for r in results[name]) for w in workloads} for name in names}
    print()
    print(f"median of {args.rounds} rounds, operations per second; num={args.num:,}, "
          f"batches={args.batches:,} of {args.batch_size}, python {sys.version.split()[0]}")
    header = f"{'workload':14s}" + "".join(f"{n:>14s}" for n in names)
    others = [n for n in names if n != "strata"]
    if "strata" in names and others:
        header += f"{'strata/best':>14s}"
    print(header)
    for w in workloads:
        line = f"{w:14s}" + "".join(f"{median[n][w]:>14,.0f}" for n in names)
        if "strata" in names and others:
            best = max(median[n][w] for n in others)
            line += f"{median['strata'][w] / best:>13.2f}x"
        print(line)
    t = f"readrandom{args.threads}"
    for n in names:
        print(f"{n}: {args.threads} threads of gets at {median[n][t] / median[n]['readrandom']:.2f}x its one-thread rate")
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(["round", "engine", "workload", "ops_per_sec"])
            for n in names:
                for i, rows in enumerate(results[n]):
                    for w, v in rows.items():
                        out.writerow([i + 1, n, w, f"{v:.0f}"])


if __name__ == "__main__":
    main()
