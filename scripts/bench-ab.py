#!/usr/bin/env python3
"""Strata against Strata: two builds side by side in one run, for a change that should not move
the figures (a refactor, a move of code between files):

    scripts/bench-ab.py OLD_DIR NEW_DIR [--rounds N] [--num N] [--out FILE]

Each directory holds a `strata-bench` and a `strata` binary (release builds). The rounds run,
for each build in turn (the order alternating from round to round), first
- strata-bench's 1M benchmark on Strata (docs/BENCHMARKS.md's workloads, --num entries),
then, once the disk has written back what those left,
- `strata serve --sync everysec` under redis-benchmark: SET and GET at -P 1 and at -P 16.
It prints each workload's median ops/sec for both builds and the ratio new/old, with every
round's figures, and writes the same to --out when given."""
import argparse
import csv
import io
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOADS = ("fillseq,fillrandom,overwrite,waitforcompaction,readrandom,readmissing,readseq,"
             "readreverse,seekrandom,compact,readrandom,readseq,readreverse,seekrandom")
SERVER_RUNS = [
    ("P1", ["-t", "set,get", "-n", "300000", "-r", "1000000", "-d", "100", "-c", "50", "-P", "1"]),
    ("P16", ["-t", "set,get", "-n", "500000", "-r", "1000000", "-d", "100", "-c", "50", "-P", "16"]),
]


def engine_run(bindir, num):
    """ops/sec per benchmark of one strata-bench run (a benchmark run twice keeps both, as
    NAME and NAME#2)."""
    with tempfile.TemporaryDirectory(prefix="strata-ab-") as db:
        out = subprocess.run(
            [os.path.join(bindir, "strata-bench"), "--json", f"--num={num}",
             f"--benchmarks={WORKLOADS}", "--db", db],
            check=True, capture_output=True, text=True).stdout
    figures = {}
    for line in out.splitlines():
        try:
            j = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "benchmark" not in j or "ops_per_sec" not in j:
            continue
        name = j["benchmark"]
        if name in figures:
            name += "#2"
        figures[name] = float(j["ops_per_sec"])
    if not figures:
        sys.exit(f"{bindir}/strata-bench printed no results:\n{out[-2000:]}")
    return figures


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_run(bindir):
    """requests/sec of redis-benchmark's SET and GET against one build's server."""
    figures = {}
    data = tempfile.mkdtemp(prefix="strata-ab-serve-")
    port = free_port()
    server = subprocess.Popen(
        [os.path.join(bindir, "strata"), "serve", "--dir", os.path.join(data, "db"),
         "--port", str(port), "--sync", "everysec"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            ping = subprocess.run(["redis-cli", "-p", str(port), "ping"],
                                  capture_output=True, text=True)
            if ping.stdout.strip() == "PONG":
                break
            time.sleep(0.1)
        else:
            sys.exit(f"{bindir}/strata serve did not answer PING")
        for label, args in SERVER_RUNS:
            out = subprocess.run(["redis-benchmark", "-p", str(port), "--csv", *args],
                                 check=True, capture_output=True, text=True).stdout
            for row in csv.reader(io.StringIO(out)):
                if len(row) >= 2 and row[0] in ("SET", "GET"):
                    figures[f"{row[0]} -{label}"] = float(row[1])
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)
    if not figures:
        sys.exit("redis-benchmark printed no results")
    return figures


def main():
    p = argparse.ArgumentParser()
    p.add_argument("old")
    p.add_argument("new")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--num", type=int, default=1000000)
    p.add_argument("--out")
    a = p.parse_args()
    for d in (a.old, a.new):
        for b in ("strata-bench", "strata"):
            if not os.access(os.path.join(d, b), os.X_OK):
                sys.exit(f"{d} has no {b} binary")
    runs = {"old": [{} for _ in range(a.rounds)], "new": [{} for _ in range(a.rounds)]}
    # The engine's rounds first, then the server's, after the disk has written back what the
    # engine's runs left dirty: a server run right after an engine run met that write-back.
    for phase, measure in (("engine", lambda d: engine_run(d, a.num)), ("server", server_run)):
        if phase == "server":
            subprocess.run(["sync"], check=False)
            time.sleep(5)
        for r in range(a.rounds):
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            for which in order:
                d = getattr(a, which)
                print(f"{phase} round {r + 1}: {which} ({d})", file=sys.stderr, flush=True)
                runs[which][r].update(measure(d))
    names = [n for n in runs["old"][0] if all(n in f for f in runs["old"] + runs["new"])]
    lines = [f"A/B, {a.rounds} rounds: old {a.old}, new {a.new}; ops/sec (median), "
             "ratio new/old, then each round old/new",
             f"{'workload':<16} {'old':>10} {'new':>10} {'ratio':>6}  rounds"]
    for n in names:
        old = [f[n] for f in runs["old"]]
        new = [f[n] for f in runs["new"]]
        mo, mn = statistics.median(old), statistics.median(new)
        each = " ".join(f"{o:.0f}/{w:.0f}" for o, w in zip(old, new))
        lines.append(f"{n:<16} {mo:>10.0f} {mn:>10.0f} {mn / mo:>6.2f}  {each}")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
