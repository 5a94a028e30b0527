"""pytest: the purlin Python package on the host datapath, every collective, under purlinrun.

Each suite of checks.py runs once per world size in `purlinrun -n N python worker.py SUITE`; each
check is then one pytest test that passes when every rank reported it ok. torch checks are skipped
when torch is not installed (CI installs numpy only; they run where torch is, e.g. the GPU machine).
"""

import json
import atexit
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import checks  # noqa: E402
import purlin  # noqa: E402

TIMEOUT_S = int(os.environ.get("PURLIN_TEST_LAUNCH_TIMEOUT", "300"))  # per launch


def purlinrun():
    p = os.environ.get("PURLINRUN") or shutil.which("purlinrun")
    if not p:
        here = os.path.join(os.path.dirname(sys.executable), "purlinrun")
        p = here if os.path.exists(here) else None
    assert p, "purlinrun not found (it is installed with the purlin package)"
    return p


def run_ranks(n, suite, env_extra=None, explicit=False):
    """Start n ranks of worker.py SUITE; {(name): {rank: (ok, msg)}} and the raw output."""
    env = dict(os.environ)
    env.setdefault("PURLIN_TIMEOUT_MS", "20000")
    env.setdefault("PURLIN_DATAPATH", "host")  # also on a machine with GPUs (cuda suite: "cuda")
    outdir = tempfile.mkdtemp(prefix="plpy-pytest-")
    env["PURLIN_TEST_OUT"] = outdir
    env.update(env_extra or {})
    worker = [sys.executable, os.path.join(HERE, "worker.py"), suite]
    if explicit:
        uid = purlin.get_unique_id().hex()  # this process hosts the rendezvous
        procs = [subprocess.Popen(worker + ["--explicit", str(r), str(n), uid], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for r in range(n)]
        outs = [p.communicate(timeout=TIMEOUT_S)[0] for p in procs]
        rc = max(p.returncode for p in procs)
        out = "".join(outs)
    else:
        cmd = [purlinrun(), "-n", str(n), "--timeout", str(TIMEOUT_S)] + worker
        cp = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=TIMEOUT_S + 30)
        rc, out = cp.returncode, cp.stdout
    results = {}
    for fn in sorted(os.listdir(outdir)):
        with open(os.path.join(outdir, fn)) as f:
            for line in f:
                d = json.loads(line)
                results.setdefault(d["name"], {})[d["rank"]] = (d["ok"], d["msg"])
    shutil.rmtree(outdir, ignore_errors=True)
    return rc, results, out


_cache = {}


def suite_results(n, suite, **kw):
    key = (n, suite, repr(sorted(kw.items())))
    if key not in _cache:
        _cache[key] = run_ranks(n, suite, **kw)
    return _cache[key]


def assert_check(n, suite, name, **kw):
    rc, results, out = suite_results(n, suite, **kw)
    per_rank = results.get(name)
    assert per_rank is not None, "check %s did not report (exit %d):\n%s" % (name, rc, out[-6000:])
    missing = sorted(set(range(n)) - set(per_rank))
    assert not missing, "ranks %s did not report %s (exit %d):\n%s" % (missing, name, rc,
                                                                      out[-6000:])
    bad = {r: m for r, (ok, m) in per_rank.items() if not ok}
    assert not bad, "\n".join("rank %d: %s" % (r, m) for r, m in sorted(bad.items()))


@pytest.mark.parametrize("name", checks.names("main"))
@pytest.mark.parametrize("world", [3, 4, 1])
def test_numpy(world, name):
    assert_check(world, "main", name)


@pytest.mark.parametrize("name", checks.names("main"))
def test_numpy_world2_worker_exits_clean(name):
    assert_check(2, "main", name)
    rc, _, out = suite_results(2, "main")
    assert rc == 0, "purlinrun exited %d:\n%s" % (rc, out[-4000:])


@pytest.mark.parametrize("name", ["all_reduce_every_dtype_and_op", "all_to_all_v_skewed",
                                  "c_errors_become_purlin_error"])
def test_explicit_init_with_unique_id(name):
    """purlin.init(rank, world_size, unique_id) with the id made in another process (this one)."""
    os.environ.pop("PURLIN_TEST_ONLY", None)
    assert_check(2, "main", name, explicit=True)


def test_fault_timeout():
    rc, results, out = run_ranks(3, "fault", {"PURLIN_TIMEOUT_MS": "2000"})
    per_rank = results.get("timeout_names_the_missing_rank", {})
    assert sorted(per_rank) == [0, 1, 2], out[-6000:]
    bad = {r: m for r, (ok, m) in per_rank.items() if not ok}
    assert not bad, bad


def test_init_errors_in_process():
    with pytest.raises(ValueError, match="unique_id"):
        purlin.init(rank=0, world_size=2)
    with pytest.raises(ValueError, match="128 bytes"):
        purlin.init(rank=0, world_size=2, unique_id=b"short")
    with pytest.raises(ValueError, match="outside"):
        purlin.init(rank=3, world_size=2, unique_id=bytes(128))
    with pytest.raises(ValueError, match="device"):
        purlin.init(device="tpu")
    with pytest.raises(RuntimeError, match="init"):
        purlin.all_reduce([1.0])
    env = {k: v for k, v in os.environ.items()}
    try:
        for k in ("PURLIN_RANK", "PURLIN_WORLD_SIZE", "PURLIN_UNIQUE_ID", "RANK", "WORLD_SIZE",
                  "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                  "SLURM_PROCID", "SLURM_NTASKS"):
            os.environ.pop(k, None)
        with pytest.raises(purlin.PurlinError) as ei:
            purlin.init()
        assert ei.value.status == "PURLIN_ERR_INVALID_USAGE", ei.value.status
        assert ei.value.text, "no last-error text"
    finally:
        os.environ.clear()
        os.environ.update(env)
    assert not purlin.is_initialized()


def test_module_surface():
    for name in ("init", "finalize", "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                 "all_gather_v", "reduce_scatter_v", "all_to_all_v", "empty", "rank",
                 "world_size", "get_unique_id"):
        assert callable(getattr(purlin, name)), name
    assert [m.name for m in purlin.ReduceOp] == ["SUM", "PROD", "MIN", "MAX", "AVG"]
    assert purlin.ReductionMode.DETERMINISTIC == 1
    assert issubclass(purlin.PurlinError, RuntimeError)
    assert len(purlin.get_unique_id()) == 128
    assert "torch" not in sys.modules or True  # importing purlin does not import torch:
    code = "import sys, purlin; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stdout


# ---- torch CPU (skipped without torch: CI has numpy only) --------------------------------------

@pytest.mark.parametrize("name", checks.names("torch"))
@pytest.mark.parametrize("world", [3])
def test_torch_cpu(world, name):
    pytest.importorskip("torch")
    assert_check(world, "torch", name, env_extra={"PURLIN_TEST_GLOO_FILE": GLOO_FILE})


# torch.distributed's rendezvous for the gloo comparison (a file store: no port to pick)
# (prefixes without "purlin": tests/host's leftover check looks for that name while this runs)
_GLOO_DIR = tempfile.mkdtemp(prefix="plpy-gloo-")
atexit.register(shutil.rmtree, _GLOO_DIR, True)
GLOO_FILE = os.path.join(_GLOO_DIR, "store")


# ---- CUDA (the GPU machine; tests/python/gpu.sh) ------------------------------------------------

def _cuda_world():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device: the cuda suite runs on the GPU machine (tests/python/gpu.sh)")
    return int(os.environ.get("PURLIN_TEST_CUDA_WORLD", "2"))


@pytest.mark.parametrize("name", checks.names("cuda"))
def test_cuda(name):
    world = _cuda_world()
    assert_check(world, "cuda", name, env_extra={"PURLIN_TEST_GLOO_FILE": GLOO_FILE + "-cuda",
                                                 "PURLIN_DATAPATH": "cuda"})
