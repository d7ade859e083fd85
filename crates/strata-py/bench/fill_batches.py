"""The batch workload of bench.py alone (items built inside the loop, as there), for each
engine named, with wall and CPU time of the process per entry: for profiling it.

    target/python-bench-venv/bin/python crates/strata-py/bench/fill_batches.py ENGINES [BATCHES]

(after crates/strata-py/bench/run.sh has made that virtual environment). ENGINES is a
comma-separated list (strata,plyvel,rocksdict); BATCHES of 100 puts, 100,000 by default.
"""

import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench  # noqa: E402


def main():
    names = sys.argv[1].split(",")
    batches = int(sys.argv[2]) if len(sys.argv) > 2 else 100_000
    vals = bench.values()
    entries = batches * 100
    for name in names:
        root = tempfile.mkdtemp(prefix="strata-py-fill-batches-")
        engine = bench.ENGINES[name](os.path.join(root, "db"))
        cpu = time.process_time()
        wall = bench.fill_batches(engine, batches, 100, vals)
        cpu = time.process_time() - cpu
        print(f"{name:10s} {entries / wall:12,.0f}/s  wall {wall / entries * 1e6:.3f} us"
              f"  cpu {cpu / entries * 1e6:.3f} us per entry", flush=True)
        check = engine.get(b"%016d" % (entries - 1))
        engine.close()
        shutil.rmtree(root)
        if check is None:
            sys.exit(f"{name}: the last batch's last key is missing")


if __name__ == "__main__":
    main()
