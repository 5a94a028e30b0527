#!/usr/bin/env python3
"""Plot bench JSON files (testAR ... -J file.json): per collective, bus bandwidth and latency versus
size, purlin (out-of-place and in-place) beside NCCL when the run had --baseline nccl, and beside the
speed-of-light floor of the same run.

    python3 bench/plot.py results/*.json -o results/plot.png

Files of one collective and world (a sweep split in several runs, e.g. small and large sizes) are
merged into one row. --table FILE also writes a markdown table (size x collective: time per call,
busbw, time over the floor, #wrong when not 0), which needs no matplotlib.

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


def merge(runs):
    """One run per (collective, ranks): rows of every file, sorted by size."""
    out = {}
    for d in runs:
        key = (d["collective"], d["params"]["ranks"])
        if key in out:
            out[key]["rows"] = sorted(out[key]["rows"] + d["rows"], key=lambda r: r["bytes"])
        else:
            out[key] = dict(d)
            out[key]["rows"] = sorted(d["rows"], key=lambda r: r["bytes"])
    return list(out.values())


def size_name(b):
    for unit, n in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= n and b % n == 0:
            return "%d %s" % (b // n, unit)
    return "%d B" % b


def write_table(runs, path):
    """Markdown: one row per size, one column per collective (out of place); with --baseline nccl,
    each cell's NCCL time / purlin time, and below the table that ratio's geometric mean per
    collective over 1 KiB-512 KiB (latency) and 1 MiB-1 GiB (bandwidth): above 1, purlin is faster."""
    import math

    cols = [d["collective"] for d in runs]
    cells = {}
    ratios = {}  # collective -> [(bytes, nccl / purlin)]
    for d in runs:
        for r in d["rows"]:
            c = r.get("out_of_place")
            if not c:
                continue
            t = c["time_us"]
            cell = "%s, %.1f GB/s, %.2fx" % (
                ("%.1f us" % t) if t < 1000 else ("%.2f ms" % (t / 1e3)), c["busbw_GBs"], c["x_floor"])
            if c.get("wrong", 0) not in (0, -1):
                cell += ", %d wrong" % c["wrong"]
            n = c.get("nccl_time_us")
            if n and t > 0:
                cell += ", vs NCCL %.2fx" % (n / t)
                ratios.setdefault(d["collective"], []).append((r["bytes"], n / t))
                if c.get("nccl_wrong", 0) not in (0, -1):
                    cell += ", NCCL %d wrong" % c["nccl_wrong"]
            cells[(r["bytes"], d["collective"])] = cell
    sizes = sorted({b for b, _ in cells})
    with open(path, "w") as f:
        f.write("| size | " + " | ".join(cols) + " |\n")
        f.write("|---" * (len(cols) + 1) + "|\n")
        for b in sizes:
            f.write("| %s | " % size_name(b) + " | ".join(cells.get((b, c), "") for c in cols) + " |\n")
        if ratios:

            def gmean(v):
                return math.exp(sum(math.log(x) for x in v) / len(v)) if v else float("nan")

            f.write("\nNCCL time / purlin time, geometric mean (above 1: purlin faster)\n\n")
            f.write("| collective | 1 KiB - 512 KiB | 1 MiB - 1 GiB | slowest size |\n|---|---|---|---|\n")
            for c in cols:
                v = ratios.get(c, [])
                lat = [x for b, x in v if b <= 512 << 10]
                bw = [x for b, x in v if b >= 1 << 20]
                worst = min(v, key=lambda bx: bx[1]) if v else None
                f.write("| %s | %.2fx | %.2fx | %s |\n" % (
                    c, gmean(lat), gmean(bw),
                    "%s: %.2fx" % (size_name(worst[0]), worst[1]) if worst else "-"))
    print("plot.py: wrote %s" % path)


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
    ap.add_argument("--table", help="also write a markdown table of the runs to this file")
    args = ap.parse_args()
    runs = merge(load(args.json))
    if args.table:
        write_table(runs, args.table)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is not installed; no plot written (pip install matplotlib)")
        return 0

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
