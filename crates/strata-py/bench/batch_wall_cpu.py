"""Wall time against CPU time of the process, per entry, for the same prebuilt write batches
on each engine: where the batch workload's time goes.

    target/python-bench-venv/bin/python crates/strata-py/bench/batch_wall_cpu.py [ENGINES]

(after crates/strata-py/bench/run.sh has made that virtual environment). ENGINES is a
comma-separated list (strata,plyvel,rocksdict by default). The items are built before the
clock starts, so that the figures are the engine's and the binding's alone.
"""

import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402

BATCHES = 20000
SIZE = 100


def main():
    names = (sys.argv[1] if len(sys.argv) > 1 else "strata,plyvel,rocksdict").split(",")
    vals = bench.values()
    items = [[(b"%016d" % (b * SIZE + i), vals[(b * SIZE + i) & 1023]) for i in range(SIZE)]
             for b in range(BATCHES)]
    for name in names:
        path = os.path.join(tempfile.mkdtemp(prefix="strata-py-batches-"), "db")
        engine = bench.ENGINES[name](path)
        wall, cpu = time.perf_counter(), time.process_time()
        for batch in items:
            engine.batch(batch)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        entries = BATCHES * SIZE
        print(f"{name:10s} wall {wall / entries * 1e6:.3f} us  cpu {cpu / entries * 1e6:.3f} us per entry")
        engine.close()


if __name__ == "__main__":
    main()
