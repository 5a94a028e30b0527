"""One rank of the Python tests: runs the checks of a suite (checks.py) and prints one line per
check, and appends {"name", "rank", "ok", "msg", "seconds"} as a JSON line to
$PURLIN_TEST_OUT/rank-R.jsonl when PURLIN_TEST_OUT is set.

    purlinrun -n 3 python worker.py main            # from the launcher's variables
    python worker.py main --explicit RANK WORLD HEX  # purlin.init(rank, world_size, unique_id)
"""

import json
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    args = sys.argv[1:]
    suite = args[0] if args else "main"
    only = os.environ.get("PURLIN_TEST_ONLY")
    out = os.environ.get("PURLIN_TEST_OUT")  # a folder: one file of JSON lines per rank
    import purlin

    if "--explicit" in args:
        i = args.index("--explicit")
        rank, world, hexid = int(args[i + 1]), int(args[i + 2]), args[i + 3]
        purlin.init(rank=rank, world_size=world, unique_id=bytes.fromhex(hexid))
    else:
        purlin.init()
    import checks

    ctx = checks.Ctx()
    for s, name, fn in checks.CHECKS:
        if s != suite or (only and name not in only.split(",")):
            continue
        t0 = time.monotonic()
        try:
            fn(ctx)
            ok, msg = True, ""
        except BaseException as e:  # noqa: BLE001
            ok = False
            msg = "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc(limit=6))
        line = json.dumps({"name": name, "rank": ctx.rank, "ok": ok, "msg": msg,
                           "seconds": round(time.monotonic() - t0, 3)})
        if out:
            with open(os.path.join(out, "rank-%d.jsonl" % ctx.rank), "a") as f:
                f.write(line + "\n")
        os.write(1, ("%s check %s %s\n" % (ctx.rank, name, "ok" if ok else "FAILED\n" + msg))
                 .encode())
    purlin.finalize()


if __name__ == "__main__":
    main()
