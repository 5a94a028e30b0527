#!/usr/bin/env python3
"""PURLIN_PROFILE's direct-kernel lines of bench tool logs, as one table: per log, the means over
its ranks of each phase (us per call), with the ranks' range of the entry and of the CTA mean.

    dprof_table.py LOG [LOG ...]

A LOG is a bench tool's stdout and stderr (gpu_quick.sh's $R/testX.CONFIG.wN.txt). Ranks print
their lines at destroy, concurrently, so a line cut by another rank's output is not counted; n
says how many ranks were. Logs without such lines are left out. Used by tools/gpu_quick.sh;
docs/tuning.md ("Tools", finding 32) says what the phases are."""
import os
import re
import sys

LINE = re.compile(
    r"rank (\d+)/(\d+): direct kernel, (\d+) calls, mean us: entry to the first CTA's data "
    r"([\d.]+), data start skew ([\d.]+), data span ([\d.]+), CTA data mean ([\d.]+), first CTA "
    r"done ([\d.]+), longest CTA ([\d.]+), last data end to exit ([\d.]+), kernel ([\d.]+)")
COLS = ["entry", "skew", "span", "CTA mean", "first done", "longest", "end to exit", "kernel"]


def table(paths):
    out = []
    for path in paths:
        try:
            with open(path, errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        ranks, world = {}, 0
        for m in LINE.finditer(text):
            ranks[int(m.group(1))] = [float(x) for x in m.groups()[3:]]
            world = max(world, int(m.group(2)))
        if not ranks:
            continue
        v = list(ranks.values())
        mean = [sum(r[i] for r in v) / len(v) for i in range(len(COLS))]
        lo = [min(r[i] for r in v) for i in range(len(COLS))]
        hi = [max(r[i] for r in v) for i in range(len(COLS))]
        name = os.path.basename(path)
        name = name[:-4] if name.endswith(".txt") else name
        out.append((name, len(v), world, mean, lo, hi))
    if not out:
        return []
    w = max(len(o[0]) for o in out)
    lines = [f"{'direct kernel, us per call':{w}}  n/w  " + "  ".join(f"{c:>10}" for c in COLS) +
             "  (entry, CTA mean: ranks' range)"]
    for name, n, world, mean, lo, hi in out:
        lines.append(f"{name:{w}}  {n}/{world}  " + "  ".join(f"{x:10.1f}" for x in mean) +
                     f"  ({lo[0]:.1f}-{hi[0]:.1f}, {lo[3]:.1f}-{hi[3]:.1f})")
    return lines


if __name__ == "__main__":
    for line in table(sys.argv[1:]):
        print(line)
