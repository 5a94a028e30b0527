#!/usr/bin/env python3
"""Build the CUDA tuning table (src/tune_cuda_table.h) from tools/gpu_sweep.sh's bench JSONs.

    tools/tune_table.py [--out src/tune_cuda_table.h] [--min-gain 0.02] [--regret 0.10] [--check]
                        [--unmeasured FILE] RUN.json|DIR [...]

Each file is one bench tool run (-J); params.purlin_env holds the PURLIN_* knobs in force (no
prefix). Per world, every knob config is scored against the baseline (no knobs: tune.c's own
rules) by the geometric mean of time_cfg / time_base over the sizes both measured. Configs are
accepted greedily, best first, when they gain more than --min-gain and touch no knob already
accepted; their knobs become the world's table rows. The report (stdout) lists every config and
every size where the chosen config is more than --regret slower than the best config measured;
--check makes such sizes exit 1. --unmeasured lists the chosen combinations no file measured as
one config (their regret is not known until they run). Without --out the header is printed after
the report."""
import argparse
import json
import math
import pathlib
import re
import sys

KNOBS = ("LANES", "CHUNK_BYTES", "STAGING_BYTES", "LATENCY_MAX_BYTES", "ONESHOT_MAX_BYTES",
         "TWOSHOT_MAX_BYTES", "LANE_BYTES", "POLL_BACKOFF_NS", "THREADS", "LEAN", "LEAN_PKTS",
         "LEAN_CTAS", "DIRECT", "DIRECT_MIN_BYTES", "DIRECT_CTAS", "DIRECT_CTA_BYTES",
         "DIRECT_UNROLL", "DIRECT_STREAM", "DIRECT_PUSH", "DIRECT_A2AV", "DIRECT_RED_BATCH",
         "DIRECT_QUEUE", "DIRECT_QUEUE_BYTES", "DIRECT_ALIGN")
SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_value(s):
    """'4M' -> 4194304, '256k' -> 262144, '32' -> 32; ValueError when it does not parse."""
    m = re.fullmatch(r"\s*([+-]?\d+)\s*([KMG]?)\s*", str(s), re.I)
    if not m:
        raise ValueError(f"bad knob value {s!r}")
    return int(m.group(1)) * SUFFIX[m.group(2).upper()]


def cfg_str(cfg):
    return ",".join(f"{k}={v}" for k, v in sorted(cfg)) or "table"


def load(paths):
    """-> (time[world][cfg][key] = us, files used, hosts)."""
    files = []
    for p in map(pathlib.Path, paths):
        files += sorted(p.rglob("*.json")) if p.is_dir() else [p]
    data, used, hosts = {}, 0, set()
    for f in files:
        try:
            j = json.loads(f.read_text())
            par = j["params"]
            if par.get("datapath") != "cuda":
                print(f"tune_table: {f}: datapath {par.get('datapath')!r}, not cuda: skipped",
                      file=sys.stderr)
                continue
            env = par.get("purlin_env") or {}
            cfg = frozenset((k, parse_value(v)) for k, v in env.items() if k in KNOBS)
            world, tool, mem, mode = int(par["ranks"]), j["tool"], par["memory"], par["mode"]
            times = {}
            for r in j["rows"]:
                o = r.get("out_of_place")
                if o and o.get("wrong", 1) == 0:
                    key = (tool, mem, mode, int(r["bytes"]))
                    times[key] = min(float(o["time_us"]), times.get(key, math.inf))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            print(f"tune_table: {f}: skipped ({e})", file=sys.stderr)
            continue
        used += 1
        hosts.add(str(j.get("host", "?")))
        t = data.setdefault(world, {}).setdefault(cfg, {})
        for key, us in times.items():
            t[key] = min(us, t.get(key, math.inf))
    return data, used, hosts


def select(world, time, min_gain, regret):
    """Report one world; -> (accepted [(cfg, score, n)], number of regret lines, the chosen
    combination when it was not measured as one config, else None)."""
    base = time[frozenset()]
    scored = []
    for cfg, t in time.items():
        ratios = [t[k] / base[k] for k in t if k in base]
        if cfg and ratios:
            score = math.exp(sum(map(math.log, ratios)) / len(ratios))
            scored.append((score, cfg_str(cfg), cfg, len(ratios), max(ratios), min(ratios)))
    scored.sort(key=lambda s: s[:2])
    accepted, taken = [], set()
    print(f"== world {world}: {len(scored)} configs scored against the table")
    for score, name, cfg, n, worst, best in scored:
        knobs = {k for k, _ in cfg}
        ok = score < 1 - min_gain and not knobs & taken
        if ok:
            accepted.append((cfg, score, n))
            taken |= knobs
        print(f"  {'*' if ok else ' '} {score:.3f}  n={n:<4d} worst {worst:.3f} best {best:.3f}"
              f"  {name}")
    chosen = frozenset().union(*(c for c, _, _ in accepted))
    print(f"  chosen: {cfg_str(chosen)}")
    if chosen in time:
        ct = time[chosen]
    elif not accepted:
        ct = base
    else:
        print("  chosen combination not measured as one config: regret from its parts is not known")
        return accepted, 0, chosen
    bad = 0
    for key in sorted({k for t in time.values() for k in t}):
        if key not in ct:
            continue
        us, name = min((t[key], cfg_str(c)) for c, t in time.items() if key in t)
        if ct[key] / us > 1 + regret:
            bad += 1
            print(f"w{world} {' '.join(map(str, key))}: {name} is {ct[key] / us:.2f}x faster"
                  " than the table")
    return accepted, bad, None


def header(rows, used, hosts, worlds):
    out = ["/* tune_cuda_table.h -- the CUDA tuning table: rows src/tune.c applies over its"
           " per-world rules",
           " * for a communicator of that world, before the environment's overrides. Generated by",
           f" * tools/tune_table.py from {used} sweep files (hosts: {', '.join(sorted(hosts))};",
           f" * worlds: {', '.join(map(str, sorted(worlds)))}); do not edit by hand: rerun the"
           " sweep.",
           " * An empty table (no rows) means every world runs on tune.c's rules. */"]
    for world, knob, val, score, n in sorted(rows):
        out.append(f"PL_TUNE_ROW({world}, {knob}, {val}) /* {score:.3f} of the table's time,"
                   f" geomean of {n} sizes */")
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("paths", nargs="+", help="bench JSON files or directories of them")
    ap.add_argument("--out", help="write the header here (default: print it after the report)")
    ap.add_argument("--min-gain", type=float, default=0.02)
    ap.add_argument("--regret", type=float, default=0.10)
    ap.add_argument("--check", action="store_true", help="exit 1 when any size has regret")
    ap.add_argument("--unmeasured", help="write here a line '<world> K=V,K=V' per world whose chosen"
                    " combination no file measured as one config (gpu_sweep.sh runs them)")
    a = ap.parse_args(argv)
    data, used, hosts = load(a.paths)
    rows, worlds, bad, todo = [], set(), 0, []
    for world in sorted(data):
        if frozenset() not in data[world]:
            print(f"tune_table: world {world}: no baseline (no-knob) run: skipped", file=sys.stderr)
            continue
        worlds.add(world)
        accepted, b, unmeasured = select(world, data[world], a.min_gain, a.regret)
        bad += b
        if unmeasured:
            todo.append(f"{world} {cfg_str(unmeasured)}")
        rows += [(world, k, v, s, n) for cfg, s, n in accepted for k, v in cfg]
    if a.unmeasured:
        pathlib.Path(a.unmeasured).write_text("".join(t + "\n" for t in todo))
    h = header(rows, used, hosts, worlds)
    if a.out:
        pathlib.Path(a.out).write_text(h)
        print(f"wrote {a.out}: {len(rows)} rows")
    else:
        print("== tune_cuda_table.h")
        print(h, end="")
    return 1 if a.check and bad else 0


if __name__ == "__main__":
    sys.exit(main())
