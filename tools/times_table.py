#!/usr/bin/env python3
"""One table of a benchmark tool's times (us, out of place) per size, one column per run.

    times_table.py TITLE LABEL RUN.json [LABEL RUN.json ...]

Each JSON is a bench tool's -J output; the first row is the barrier floor of that run. A file that
is missing or unreadable leaves its column out. The last column's x floor (time over that run's
floor, as the tool computed it) is printed after it. Used by tools/gpu_quick.sh and
tools/gpu_ab.sh."""
import json
import sys


def main(argv):
    title, cols, xf = argv[1], {}, {}
    for label, path in zip(argv[2::2], argv[3::2]):
        try:
            with open(path) as f:
                j = json.load(f)
        except (OSError, ValueError):
            continue
        rows = [x for x in j["rows"] if x.get("out_of_place")]
        cols[label] = {x["bytes"]: x["out_of_place"]["time_us"] for x in rows}
        cols[label]["floor"] = j["speed_of_light"]["barrier_us"]
        xf = {x["bytes"]: x["out_of_place"]["x_floor"] for x in rows}
    if not cols:
        return
    width = {c: max(7, len(c)) for c in cols}
    sizes = ["floor"] + sorted({s for v in cols.values() for s in v if s != "floor"})
    print(f"{title}: time us  " + "  ".join(f"{c:>{width[c]}}" for c in cols) + "  x floor")
    for s in sizes:
        print(f"  {s:>11}  " + "  ".join(
            f"{cols[c].get(s, float('nan')):{width[c]}.1f}" for c in cols) +
            (f"  {xf[s]:7.2f}" if s in xf else ""))


if __name__ == "__main__":
    main(sys.argv)
