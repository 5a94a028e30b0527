#!/usr/bin/env python3
"""sweep_pick.py -- from the JSON files of tools/gpu_sweep.sh (names w<world>.<tool>.<config>.json),
print per (world, tool, size) the fastest config and how much slower each other config was: the raw
material of the tuning table (issue 5) and the check that no size is left on a config more than 10%
slower than the best. Standard library only."""
import json, os, sys, collections

best = collections.defaultdict(dict)  # (world, tool, bytes) -> {config: time_us}
for path in sys.argv[1:]:
    name = os.path.basename(path)[:-5]
    world, tool, cfg = name.split(".", 2)
    try:
        d = json.load(open(path))
    except (OSError, ValueError):
        continue
    for row in d.get("rows", []):
        r = row.get("out_of_place") or row.get("in_place")
        if r and r.get("wrong", 1) == 0:
            best[(world, tool, row["bytes"])][cfg] = r["time_us"]
print("# world tool bytes | best config time_us | others: config time/best")
for key in sorted(best, key=lambda k: (k[0], k[1], k[2])):
    times = best[key]
    cfg, t = min(times.items(), key=lambda kv: kv[1])
    rest = " ".join("%s=%.2f" % (c, v / t) for c, v in sorted(times.items()) if c != cfg)
    print("%s %s %d | %s %.2f | %s" % (key[0], key[1], key[2], cfg, t, rest))
