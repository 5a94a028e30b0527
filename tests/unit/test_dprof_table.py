#!/usr/bin/env python3
"""Unit test of tools/dprof_table.py on synthetic logs with known phases.

    python3 tests/unit/test_dprof_table.py

Checks the means and ranges over ranks, that a line cut by another rank's output is not counted
(n), and that logs without direct-kernel lines are left out. Prints "test_dprof_table: ok (<n>
checks)"; exits 1 on the first failure."""
import importlib.util
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import Checks  # noqa: E402

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                    "dprof_table.py")
check = Checks("test_dprof_table")


def line(r, w, v):
    return (f"purlin profile: rank {r}/{w}: direct kernel, 171 calls, mean us: entry to the first "
            f"CTA's data {v[0]:.2f}, data start skew {v[1]:.2f}, data span {v[2]:.2f}, CTA data "
            f"mean {v[3]:.2f}, first CTA done {v[4]:.2f}, longest CTA {v[5]:.2f}, last data end "
            f"to exit {v[6]:.2f}, kernel {v[7]:.2f}\n")


def main():
    spec = importlib.util.spec_from_file_location("dprof_table", TOOL)
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    rng = random.Random(5)
    with tempfile.TemporaryDirectory() as d:
        w, vals = 8, []
        text = "# some bench output\n"
        for r in range(w):
            v = [round(rng.uniform(1, 500), 2) for _ in range(8)]
            vals.append(v)
            text += line(r, w, v)
        cut = line(w - 1, w, vals[-1])  # rank 7's line cut by another rank's output
        text = text.replace(cut, cut[:60] + "purlin profile: rank 9/9: 0 of 20 calls\n" + cut[60:])
        good = vals[:-1]
        with open(os.path.join(d, "testA2A.X.w8.txt"), "w") as f:
            f.write(text)
        with open(os.path.join(d, "testAG.X.w8.txt"), "w") as f:
            f.write("no profile here\n")
        rows = tool.table([os.path.join(d, "testA2A.X.w8.txt"), os.path.join(d, "testAG.X.w8.txt"),
                           os.path.join(d, "missing.txt")])
        check(len(rows) == 2, f"one header and one row, got {len(rows)}")
        f = rows[1].split()
        check(f[0] == "testA2A.X.w8" and f[1] == f"{w - 1}/{w}", f"name and n/w: {f[:2]}")
        for i in range(8):
            want = sum(v[i] for v in good) / len(good)
            check(abs(float(f[2 + i]) - want) < 0.051, f"column {i}: {f[2 + i]} want {want:.2f}")
        lo0, hi0 = min(v[0] for v in good), max(v[0] for v in good)
        lo3, hi3 = min(v[3] for v in good), max(v[3] for v in good)
        check(rows[1].endswith(f"({lo0:.1f}-{hi0:.1f}, {lo3:.1f}-{hi3:.1f})"),
              f"ranges: {rows[1][-40:]}")
        check(tool.table([os.path.join(d, "testAG.X.w8.txt")]) == [], "a log without lines: none")
    print(f"test_dprof_table: ok ({check.n} checks)")


if __name__ == "__main__":
    main()
