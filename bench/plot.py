#!/usr/bin/env python3
"""Plot bench JSON files (testAR ... -J file.json): per collective, bus bandwidth and latency versus
size, purlin (out-of-place and in-place) beside NCCL when the run had --baseline nccl, and beside the
speed-of-light floor of the same run.

    python3 bench/plot.py results/*.json -o results/plot.png

matplotlib is optional: without it the script says so and exits 0 (so scripts that call it keep going).
"""
import argparse
import json
import sys


def load(paths):
    runs = []
    for p in paths:
        with open(p) as f:
            d = json.load(f)
        d["_path"] = p
        runs.append(d)
    return runs


def series(rows, placement, key):
    xs, ys = [], []
    for r in rows:
        c = r.get(placement)
        if c and c.get(key) is not None:
            xs.append(r["bytes"])
            ys.append(c[key])
    return xs, ys


def label_of(d):
    p = d["params"]
    return "%s, %d ranks, %s, %s" % (d["collective"], p["ranks"], p["datapath"], p["mode"])


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("json", nargs="+", help="files written by -J")
    ap.add_argument("-o", "--output", default="bench.png", help="PNG to write (default bench.png)")
    ap.add_argument("--type", help="only rows of this dtype (default: the first dtype of each file)")
    args = ap.parse_args()
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is not installed; no plot written (pip install matplotlib)")
        return 0

    runs = load(args.json)
    fig, axes = plt.subplots(len(runs), 2, figsize=(13, 3.8 * len(runs)), squeeze=False)
    for d, (ax_bw, ax_t) in zip(runs, axes):
        rows = d["rows"]
        dtype = args.type or (rows[0]["type"] if rows else None)
        op = rows[0]["redop"] if rows else None
        rows = [r for r in rows if r["type"] == dtype and r["redop"] == op]
        if not rows:
            continue
        factor = d.get("busbw_factor", 1.0)
        # the floor as a bandwidth: the bytes busbw counts, moved in floor time
        fx = [r["bytes"] for r in rows]
        fbw = [r["bytes"] * factor / (r["floor_us"] * 1e3) for r in rows]
        fus = [r["floor_us"] for r in rows]
        for placement, style in (("out_of_place", "-o"), ("in_place", "--s")):
            name = "out-of-place" if placement == "out_of_place" else "in-place"
            x, y = series(rows, placement, "busbw_GBs")
            if x:
                ax_bw.plot(x, y, style, label="purlin " + name, markersize=3)
            x, y = series(rows, placement, "time_us")
            if x:
                ax_t.plot(x, y, style, label="purlin " + name, markersize=3)
            nrows = [r for r in rows if r.get(placement) and r[placement].get("nccl_time_us")]
            if nrows:
                x = [r["bytes"] for r in nrows]
                t = [r[placement]["nccl_time_us"] for r in nrows]
                bw = [b * factor / (us * 1e3) for b, us in zip(x, t)]
                ax_t.plot(x, t, style, color="tab:green", label="NCCL " + name, markersize=3)
                ax_bw.plot(x, bw, style, color="tab:green", label="NCCL " + name, markersize=3)
        ax_bw.plot(fx, fbw, ":", color="gray", label="speed of light (floor)")
        ax_t.plot(fx, fus, ":", color="gray", label="floor")
        for ax in (ax_bw, ax_t):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("size (bytes)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
        ax_t.set_yscale("log")
        ax_bw.set_ylabel("busbw (GB/s)")
        ax_t.set_ylabel("time (us)")
        title = "%s (%s %s)" % (label_of(d), dtype, op)
        ax_bw.set_title(title + ": bus bandwidth", fontsize=9)
        ax_t.set_title(title + ": latency", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print("plot.py: wrote %s" % args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
