#!/usr/bin/env python3
"""What replication costs a Strata primary, and how far its replicas trail.

1. Throughput: redis-benchmark's SET at -P 1 and -P 16 against a `strata serve` primary,
   rounds alternating between no replicas and two attached (REPLICAOF / REPLICAOF NO ONE on
   the replicas between rounds); the median of each side.
2. Lag: a writer holds a steady rate of SETs (pipelines every 10 ms), while a sampler asks
   the primary its offset (ROLE) every 2 ms and each replica the offset it applied; a
   sample's lag is the time until both replicas reached the primary's offset of that
   moment. Percentiles of the lag over the run; every value checked on both replicas at
   the end.

    scripts/bench-replication.py target/release/strata [--rounds 3] [--rate 50000]
        [--seconds 20] [--replica-nice 19] [--smoke]
"""

import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import redis


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, check, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            if check():
                return
        except (redis.RedisError, OSError):
            pass
        time.sleep(0.05)
    sys.exit(f"bench-replication: timed out waiting for {what}")


def serve(binary, root, name, port, nice=0):
    log = open(os.path.join(root, f"{name}.log"), "w")
    proc = subprocess.Popen(
        ["nice", "-n", str(nice), binary, "serve", "--dir", os.path.join(root, name),
         "--port", str(port)],
        stdout=log,
        stderr=log,
    )
    wait_for(f"{name} on {port}", lambda: redis.Redis(port=port).ping())
    return proc


def online(primary):
    info = primary.info("replication")
    return info["connected_slaves"]


def attach(primary, replicas, port):
    for r in replicas:
        r.execute_command("REPLICAOF", "127.0.0.1", port)
    wait_for("both replicas online", lambda: online(primary) == 2)
    wait_for(
        "both replicas caught up",
        lambda: primary.execute_command("WAIT", 2, 1000) == 2,
    )


def detach(primary, replicas):
    for r in replicas:
        r.execute_command("REPLICAOF", "NO", "ONE")
    wait_for("no replica attached", lambda: online(primary) == 0)


def cpu_seconds(pid):
    """The user and system CPU seconds process `pid` has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def set_rate(port, pipeline, n, pid, replica_pids):
    """SETs a second, the primary's CPU microseconds per SET, and its replicas'."""
    cpu = cpu_seconds(pid)
    rcpu = sum(cpu_seconds(p) for p in replica_pids)
    out = subprocess.run(
        ["redis-benchmark", "-p", str(port), "-t", "set", "-n", str(n), "-r", "1000000",
         "-d", "100", "-c", "50", "-P", str(pipeline), "-q"],
        capture_output=True, text=True, check=True,
    ).stdout
    m = re.search(r"SET: ([\d.]+) requests per second", out.replace("\r", "\n"))
    if not m or "error" in out.lower():
        sys.exit(f"bench-replication: redis-benchmark said {out!r}")
    replicas = sum(cpu_seconds(p) for p in replica_pids) - rcpu
    return float(m.group(1)), (cpu_seconds(pid) - cpu) / n * 1e6, replicas / n * 1e6


def throughput(args, primary, replicas, port, pid, replica_pids):
    for pipeline, n in ((1, args.n), (16, args.n * 2)):
        alone, with_two = [], []
        for _ in range(args.rounds):
            detach(primary, replicas)
            alone.append(set_rate(port, pipeline, n, pid, replica_pids))
            attach(primary, replicas, port)
            with_two.append(set_rate(port, pipeline, n, pid, replica_pids))
        med = lambda rows, i: statistics.median(r[i] for r in rows)
        a, w = med(alone, 0), med(with_two, 0)
        ca, cw = med(alone, 1), med(with_two, 1)
        # CPU time counts in clock ticks (10 ms): a smoke-size run may see none at all.
        cpu_ratio = f"{cw / ca:.2f}" if ca > 0 else "- (under the clock's tick)"
        print(f"SET -P {pipeline}: no replicas {a:,.0f}/s, two replicas {w:,.0f}/s, "
              f"ratio {w / a:.2f} (rounds: {[round(x[0]) for x in alone]} / "
              f"{[round(x[0]) for x in with_two]}); the primary's CPU per SET "
              f"{ca:.2f} / {cw:.2f} us, ratio {cpu_ratio}; the two replicas' "
              f"{med(with_two, 2):.2f} us", flush=True)


def lag(args, primary, replicas, port):
    attach(primary, replicas, port)
    stop = threading.Event()
    written = {}

    def writer():
        c = redis.Redis(port=port)
        per_tick = max(1, args.rate // 100)
        n, start = 0, time.time()
        while not stop.is_set():
            p = c.pipeline(transaction=False)
            for _ in range(per_tick):
                p.set(f"lag:{n % 200000}", n)
                written[f"lag:{n % 200000}"] = str(n)
                n += 1
            p.execute()
            # Hold the rate: sleep until this tick's writes are due.
            ahead = n / args.rate - (time.time() - start)
            if ahead > 0:
                time.sleep(ahead)
        written["__count__"] = n

    samples = []  # (time, primary offset)
    seen = [[] for _ in replicas]  # (time, applied offset)

    def sampler():
        rs = [redis.Redis(port=r.connection_pool.connection_kwargs["port"]) for r in replicas]
        while not stop.is_set():
            t = time.time()
            samples.append((t, primary.execute_command("ROLE")[1]))
            for i, r in enumerate(rs):
                seen[i].append((time.time(), r.execute_command("ROLE")[4]))
            time.sleep(0.002)

    threads = [threading.Thread(target=writer), threading.Thread(target=sampler)]
    for t in threads:
        t.start()
    time.sleep(args.seconds)
    stop.set()
    for t in threads:
        t.join()
    wait_for("replicas to catch up", lambda: primary.execute_command("WAIT", 2, 1000) == 2)
    lags = []
    for t0, offset in samples:
        reached = []
        for s in seen:
            hit = next((t for t, o in s if o >= offset and t >= t0), None)
            if hit is None:
                break
            reached.append(hit)
        if len(reached) == len(replicas):
            lags.append((max(reached) - t0) * 1000)
    lags.sort()
    pct = lambda p: lags[min(len(lags) - 1, int(p / 100 * len(lags)))]
    rate = written["__count__"] / args.seconds
    print(f"lag at {rate:,.0f} SET/s over {args.seconds} s, {len(lags)} samples: "
          f"p50 {pct(50):.1f} ms, p99 {pct(99):.1f} ms, max {lags[-1]:.1f} ms", flush=True)
    del written["__count__"]
    keys = list(written)
    for r in replicas:
        got = [v.decode() if v else None for v in r.mget(keys)]
        if got != [written[k] for k in keys]:
            sys.exit("bench-replication: a replica's values differ from the primary's")
    return rate, pct(50), pct(99)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("strata")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", type=int, default=300000, help="SETs per -P 1 round")
    ap.add_argument("--rate", type=int, default=50000)
    ap.add_argument("--seconds", type=int, default=20)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, for CI")
    ap.add_argument("--replica-nice", type=int, default=0,
                    help="run the replicas at this niceness: 19 leaves them only the CPU "
                    "the primary and the benchmark do not use, as replicas on machines of "
                    "their own would")
    args = ap.parse_args()
    if args.smoke:
        args.rounds, args.n, args.rate, args.seconds = 1, 5000, 5000, 2
    root = tempfile.mkdtemp(prefix="strata-repl-bench-")
    port, r1, r2 = free_port(), free_port(), free_port()
    procs = [serve(args.strata, root, "p", port)] + [
        serve(args.strata, root, n, p, args.replica_nice) for n, p in (("r1", r1), ("r2", r2))
    ]
    try:
        primary = redis.Redis(port=port)
        replicas = [redis.Redis(port=r1), redis.Redis(port=r2)]
        throughput(args, primary, replicas, port, procs[0].pid, [p.pid for p in procs[1:]])
        lag(args, primary, replicas, port)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
            p.wait()
        # Three servers' data: gigabytes after a full run.
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
