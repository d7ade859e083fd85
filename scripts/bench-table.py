#!/usr/bin/env python3
"""Turns the result table a `strata-bench --compare` run printed (docs/bench/NAME.txt) into
Markdown, with each figure as strata-bench printed it:
    scripts/bench-table.py docs/bench/1m.txt [--steps]
--steps adds the waitforcompaction/compact steps and the write workloads' write amplification
and disk use (medians over the rounds)."""
import re
import statistics
import sys


def main():
    path = sys.argv[1]
    lines = open(path).read().splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("median ops/sec of"))
    head = lines[start + 1].split()
    engines = head[1:-2] if head[-2] == "ratio" else head[1:-1]
    ratio = head[-2] == "ratio"
    cols = ["workload"] + engines + (["ratio to the best other"] if ratio else [])
    print("| " + " | ".join(cols) + " |")
    print("| --- |" + " ---: |" * (len(cols) - 1))
    for line in lines[start + 2:]:
        parts = line.split()
        if not parts or parts[0] in ("error:",):
            break
        n = len(engines)
        figures = [f"{int(x):,}" for x in parts[1:1 + n]]
        row = [parts[0]] + figures
        if ratio:
            row.append(parts[1 + n])
        print("| " + " | ".join(row) + " |")
    if "--steps" in sys.argv:
        steps(lines, engines)


def steps(lines, engines):
    pattern = re.compile(
        r"^(\S+)/(\S+) round \d+: (?:([\d.]+) s, )?(?:write amp ([\d.]+) \(engine's own count "
        r"([\d.-]+)\), )?on disk ([\d.]+) MB(?:, the last fill's write amp to here ([\d.-]+) "
        r"\(engine's own count ([\d.-]+)\))?")
    seen = {}
    for line in lines:
        m = pattern.match(line)
        if not m:
            continue
        engine, what, secs, wa, own, disk, wa_to, own_to = m.groups()
        seen.setdefault((what, engine), []).append((secs, wa or wa_to, own or own_to, disk))
    print()
    print("| after | " + " | ".join(engines) + " |")
    print("| --- |" + " --- |" * len(engines))
    order = []
    for what, _ in seen:
        if what not in order:
            order.append(what)

    def med(values):
        v = [float(x) for x in values if x not in (None, "-")]
        return statistics.median(v) if v else None

    for what in order:
        cells = []
        for e in engines:
            rows = seen.get((what, e), [])
            if not rows:
                cells.append("")
                continue
            secs, wa, own, disk = (med(c) for c in zip(*rows))
            text = f"write amp {wa:.2f}" if wa is not None else ""
            if own is not None:
                text += f" (own count {own:.2f})"
            text += f", {disk:.0f} MB on disk"
            if secs is not None:
                text = f"{secs:.1f} s, " + text
            cells.append(text)
        print(f"| {what} | " + " | ".join(cells) + " |")


main()
