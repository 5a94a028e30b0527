#!/usr/bin/env python3
"""Unit test of tools/tune_table.py on synthetic sweep JSONs with known times.

    python3 tests/unit/test_tune_table.py

Checks value parsing, config selection (min gain, one config per knob, multi-knob configs),
the files and worlds it must ignore, the generated header rows and the regret check (--check).
Prints "test_tune_table: ok (<n> checks)"; exits 1 on the first failure."""
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pycheck import Checks  # noqa: E402

TOOL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                    "tune_table.py")
SIZES = (1024, 65536, 1048576, 67108864)
check = Checks("test_tune_table")


def base_us(tool, nbytes):
    return (10.0 if tool == "testAR" else 12.0) + nbytes / 1000.0


def bench(d, name, world, tool, env, scale, datapath="cuda", host="vmA", special=None):
    """One bench JSON: time = base_us * scale, except special {bytes: (scale, wrong)}."""
    rows = []
    for b in SIZES:
        s, wrong = (special or {}).get(b, (scale, 0))
        rows.append({"bytes": b, "count": b // 2, "type": "bf16", "redop": "none",
                     "out_of_place": {"time_us": base_us(tool, b) * s, "wrong": wrong},
                     "in_place": None})
    j = {"tool": tool, "collective": "x", "host": host,
         "params": {"ranks": world, "datapath": datapath, "memory": "purlin", "mode": "nondet",
                    "purlin_env": dict(env, DATAPATH=datapath, PDL="2")},
         "rows": rows, "wrong": 0}
    with open(os.path.join(d, name + ".json"), "w") as f:
        json.dump(j, f)
    return os.path.join(d, name + ".json")


def run(*args):
    p = subprocess.run([sys.executable, TOOL, *args], capture_output=True, text=True, timeout=30)
    return p.returncode, p.stdout, p.stderr


def report(out, world):
    """{config: (accepted, score, n)} from world's section of the report."""
    sec = out.split(f"== world {world}:")[1].split("==")[0]
    res = {}
    for m in re.finditer(r"^  ([* ]) (\d\.\d{3})  n=(\d+)\s.*  (\S+)$", sec, re.M):
        res[m.group(4)] = (m.group(1) == "*", m.group(2), int(m.group(3)))
    return res


def header_rows(text):
    return re.findall(r"^PL_TUNE_ROW\((\d+), (\w+), (-?\d+)\) /\* (.*) \*/$", text, re.M)


def main():
    spec = importlib.util.spec_from_file_location("tune_table", TOOL)
    tt = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tt)
    for s, v in (("4M", 4 << 20), ("256k", 256 << 10), ("1G", 1 << 30), ("32", 32), ("1m", 1 << 20)):
        check(tt.parse_value(s) == v, f"parse_value({s!r})")
    for s in ("4X", "", "1.5M", "M"):
        try:
            tt.parse_value(s)
            check(False, f"parse_value({s!r}) should fail")
        except ValueError:
            check(True, "")

    with tempfile.TemporaryDirectory() as d:
        w4_regret = []
        for t in ("testAR", "testA2A"):
            # world 8: accepted LANES=4 (0.90) and DIRECT_CTAS+DIRECT_UNROLL (0.93); LANES=8 loses
            # on the knob; CHUNK_BYTES loses; THREADS is under min gain; DIRECT=1's fast row is wrong.
            bench(d, f"w8_{t}_base", 8, t, {}, 1.0)
            bench(d, f"w8_{t}_base_slow", 8, t, {}, 2.0)  # duplicate keys: the minimum is kept
            bench(d, f"w8_{t}_lanes4", 8, t, {"LANES": "4"}, 0.90)
            bench(d, f"w8_{t}_lanes8", 8, t, {"LANES": "8"}, 0.95)
            bench(d, f"w8_{t}_chunk", 8, t, {"CHUNK_BYTES": "2M"}, 1.20)
            bench(d, f"w8_{t}_threads", 8, t, {"THREADS": "512"}, 0.99)
            bench(d, f"w8_{t}_direct2", 8, t, {"DIRECT_CTAS": "32", "DIRECT_UNROLL": "4"}, 0.93)
            bench(d, f"w8_{t}_wrong", 8, t, {"DIRECT": "1"}, 1.0, special={65536: (0.01, 3)})
            bench(d, f"w8_{t}_host", 8, t, {"LEAN": "1"}, 0.5, datapath="host", host="hostdp")
            bench(d, f"w8_{t}_badval", 8, t, {"LEAN_CTAS": "4X"}, 0.5, host="badval")
            # world 4: LANES=4 accepted (0.95); DIRECT_CTAS=16 loses overall but halves one size.
            w4_regret.append(bench(d, f"w4_{t}_base", 4, t, {}, 1.0, host="vmB"))
            w4_regret.append(bench(d, f"w4_{t}_lanes4", 4, t, {"LANES": "4"}, 0.95, host="vmB"))
            bench(d, f"w4_{t}_dcta", 4, t, {"DIRECT_CTAS": "16"}, 1.30, host="vmB",
                  special={1048576: (0.5, 0)} if t == "testA2A" else None)
            # world 16: nothing good enough; world 2: no baseline.
            bench(d, f"w16_{t}_base", 16, t, {}, 1.0)
            bench(d, f"w16_{t}_threads", 16, t, {"THREADS": "256"}, 0.985)
            bench(d, f"w2_{t}_lanes4", 2, t, {"LANES": "4"}, 0.5)
        with open(os.path.join(d, "broken.json"), "w") as f:
            f.write("{not json")
        out_h = os.path.join(d, "tune_cuda_table.h")

        rc, out, err = run("--check", "--out", out_h, d)
        check(rc == 1, f"--check with a regret size exits 1 (rc {rc})\n{out}\n{err}")
        for s in ("broken.json", "w8_testAR_host.json", "w8_testAR_badval.json", "world 2"):
            check(s in err, f"stderr mentions {s}")
        check("== world 2" not in out, "world 2 not reported")
        r8 = report(out, 8)
        check(r8 == {"LANES=4": (True, "0.900", 8), "DIRECT_CTAS=32,DIRECT_UNROLL=4":
                     (True, "0.930", 8), "LANES=8": (False, "0.950", 8),
                     "THREADS=512": (False, "0.990", 8), "DIRECT=1": (False, "1.000", 6),
                     "CHUNK_BYTES=2097152": (False, "1.200", 8)}, f"world 8 report {r8}")
        check("chosen combination not measured as one config" in out.split("== world 8:")[1],
              "world 8 regret unknown")
        r16 = report(out, 16)
        check(r16 == {"THREADS=256": (False, "0.985", 8)}, f"world 16 report {r16}")
        regret = [l for l in out.splitlines() if l.endswith("faster than the table")]
        check(regret == ["w4 testA2A purlin nondet 1048576: DIRECT_CTAS=16 is 1.90x faster than"
                         " the table"], f"regret lines {regret}")
        with open(out_h) as f:
            h = f.read()
        check(header_rows(h) == [
            ("4", "LANES", "4", "0.950 of the table's time, geomean of 8 sizes"),
            ("8", "DIRECT_CTAS", "32", "0.930 of the table's time, geomean of 8 sizes"),
            ("8", "DIRECT_UNROLL", "4", "0.930 of the table's time, geomean of 8 sizes"),
            ("8", "LANES", "4", "0.900 of the table's time, geomean of 8 sizes")],
            f"header rows\n{h}")
        check(h.startswith("/* tune_cuda_table.h -- the CUDA tuning table:"), "header start")
        check("from 28 sweep files (hosts: vmA, vmB;" in h, "file count and hosts")
        check("worlds: 4, 8, 16); do not edit" in h, "worlds")
        check("== tune_cuda_table.h" not in out, "no header on stdout with --out")

        rc, out, err = run("--check", "--regret", "1.0", d)
        check(rc == 0, f"--check within --regret 1.0 exits 0 (rc {rc})")
        check("faster than the table" not in out, "no regret lines at --regret 1.0")
        check(header_rows(out.split("== tune_cuda_table.h\n")[1]) == header_rows(h),
              "header on stdout without --out")

        rc, out, err = run("--check", *w4_regret)
        check(rc == 0 and "faster than the table" not in out, "--check exits 0 without regret")
        check(header_rows(out)[0][:3] == ("4", "LANES", "4"), "world 4 alone")

        # --unmeasured: world 8's chosen union was never run as one config, world 4's was
        todo = os.path.join(d, "todo.txt")
        rc, out, err = run("--unmeasured", todo, d)
        with open(todo) as f:
            lines = f.read().splitlines()
        check(lines == ["8 DIRECT_CTAS=32,DIRECT_UNROLL=4,LANES=4"], f"--unmeasured {lines}")

        rc, out, err = run("--min-gain", "0.2", d)
        check(rc == 0 and header_rows(out) == [], "--min-gain 0.2 leaves the table empty")
    print(f"test_tune_table: ok ({check.n} checks)")


if __name__ == "__main__":
    main()
