"""Checks that every rank runs, in the same order, under one communicator (see worker.py).

Each check is a function of a Ctx; it raises (AssertionError or anything else) to fail. Inputs are
generated from (seed, rank), so every rank computes the reference of a collective locally, without
trusting the library for it. Values are small integers, so that sums and products are exact in
every dtype, whatever the order of accumulation.

Suites: "main" (numpy, the buffer protocol; always), "torch" (torch CPU tensors, the custom ops,
torch.compile's tracing, torch.distributed/gloo side by side; needs torch), "fault" (a rank that
never calls; run alone, it leaves the communicator aborted).
"""

import array
import os
import time

import numpy as np

import purlin
from purlin import ReduceOp, ReductionMode, PurlinError

try:
    import ml_dtypes
except ImportError:  # bfloat16/fp8 numpy checks are skipped then
    ml_dtypes = None

CHECKS = []  # (suite, name, fn)


def check(suite="main"):
    def deco(fn):
        CHECKS.append((suite, fn.__name__, fn))
        return fn

    return deco


def names(suite):
    return [n for s, n, _ in CHECKS if s == suite]


class Ctx:
    def __init__(self):
        self.rank = purlin.rank()
        self.world = purlin.world_size()


# ---- data and references ------------------------------------------------------------------------

INT_DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64"]
FLOAT_DTYPES = ["float32", "float16", "float64"]
EXT_DTYPES = ["bfloat16", "float8_e4m3fn", "float8_e5m2"]


def np_dtype(name):
    if hasattr(np, name):
        return np.dtype(name)
    return np.dtype(getattr(ml_dtypes, name))


def all_dtypes():
    return INT_DTYPES + FLOAT_DTYPES + (EXT_DTYPES if ml_dtypes is not None else [])


def small_range(dt):
    dt = np.dtype(dt)
    if dt.kind == "u":
        return 0, 3
    if dt.itemsize == 1 and dt.kind != "i":  # fp8: keep sums and products exact
        return -2, 2
    return -3, 3


def data(dt, n, rank, seed):
    """Rank `rank`'s input of check `seed`: n small integers as dtype dt (no zeros for PROD's
    sake would not matter: zeros are fine, products stay exact)."""
    lo, hi = small_range(dt)
    rng = np.random.default_rng(seed * 1009 + rank)
    return rng.integers(lo, hi + 1, size=n).astype(np.float64).astype(dt)


def ref_reduce(arrs, op, dt):
    """op over ranks, computed in float64 (exact for these values), as dtype dt."""
    a = np.stack([x.astype(np.float64) for x in arrs])
    w = len(arrs)
    if op == ReduceOp.SUM:
        r = a.sum(0)
    elif op == ReduceOp.PROD:
        r = a.prod(0)
    elif op == ReduceOp.MIN:
        r = a.min(0)
    elif op == ReduceOp.MAX:
        r = a.max(0)
    else:
        r = a.sum(0) / w
        if np.dtype(dt).kind in "iu":
            r = np.trunc(r)
    return r.astype(np.dtype(dt))


def tol(dt):
    return {"float64": 1e-12, "float32": 1e-6, "float16": 1e-3, "bfloat16": 8e-3,
            "float8_e4m3fn": 0.07, "float8_e5m2": 0.13}.get(np.dtype(dt).name, 0)


def assert_equal(got, want, what, rtol=0.0):
    got64 = np.asarray(got).astype(np.float64).reshape(-1)
    want64 = np.asarray(want).astype(np.float64).reshape(-1)
    assert got64.shape == want64.shape, "%s: %d elements, expected %d" % (
        what, got64.size, want64.size)
    if rtol:
        ok = np.isclose(got64, want64, rtol=rtol, atol=1e-3)
    else:
        ok = got64 == want64
    if not ok.all():
        i = int(np.argmin(ok))
        raise AssertionError("%s: element %d is %r, expected %r (%d of %d differ)"
                             % (what, i, got64[i], want64[i], int((~ok).sum()), ok.size))


def expect_raises(exc, fn, *words):
    """fn() must raise exc, with every word in its message; returns the exception."""
    try:
        fn()
    except exc as e:
        msg = str(e)
        for w in words:
            assert w in msg, "%s raised %r, which does not mention %r" % (fn, msg, w)
        return e
    except Exception as e:  # noqa: BLE001
        raise AssertionError("expected %s, got %s: %s" % (exc.__name__, type(e).__name__, e))
    raise AssertionError("expected %s, nothing was raised" % exc.__name__)


def skewed(world, total, seed):
    """Zipf-like skewed counts (some zero) that sum to about `total`."""
    rng = np.random.default_rng(seed)
    w = 1.0 / np.arange(1, world + 1) ** 1.5
    c = np.floor(w / w.sum() * total).astype(int)
    rng.shuffle(c)
    c[rng.integers(0, world)] = 0
    return [int(v) for v in c]


# ---- main suite: numpy -------------------------------------------------------------------------

@check()
def all_reduce_every_dtype_and_op(c):
    seed = 1
    for name in all_dtypes():
        dt = np_dtype(name)
        for op in ReduceOp:
            for n in (1, 1000):
                seed += 1
                xs = [data(dt, n, r, seed) for r in range(c.world)]
                got = purlin.all_reduce(xs[c.rank], op=op)
                assert got.dtype == dt and got.shape == (n,)
                assert_equal(got, ref_reduce(xs, op, dt), "all_reduce %s %s n=%d" % (
                    name, op.name, n), rtol=tol(dt) if op == ReduceOp.AVG else 0)


@check()
def all_reduce_large_and_modes(c):
    n = 300_007  # past the latency regime, odd size
    for k, dt in enumerate((np.float32, np.int32)):
        xs = [data(dt, n, r, 90 + k) for r in range(c.world)]
        want = ref_reduce(xs, ReduceOp.SUM, dt)
        for mode in ReductionMode:
            assert_equal(purlin.all_reduce(xs[c.rank], mode=mode), want,
                         "all_reduce %s %s" % (np.dtype(dt).name, mode.name))
    # deterministic mode: the same bits on every rank, for non-integer values
    x = np.random.default_rng(7 + c.rank).standard_normal(50_000).astype(np.float32)
    d = purlin.all_reduce(x, mode=ReductionMode.DETERMINISTIC)
    everyone = purlin.all_gather(d.view(np.uint32))
    for r in range(c.world):
        assert (everyone[r * d.size:(r + 1) * d.size] == d.view(np.uint32)).all(), \
            "deterministic all_reduce differs between rank %d and rank %d" % (c.rank, r)
    assert np.allclose(d, sum(np.random.default_rng(7 + r).standard_normal(50_000).astype(
        np.float32).astype(np.float64) for r in range(c.world)), rtol=1e-5, atol=1e-5)


@check()
def all_reduce_in_place_and_out(c):
    xs = [data(np.float32, 4096, r, 11) for r in range(c.world)]
    want = ref_reduce(xs, ReduceOp.MAX, np.float32)
    x = xs[c.rank].copy()
    res = purlin.all_reduce(x, op=ReduceOp.MAX, out=x)
    assert res is x
    assert_equal(x, want, "in place")
    out = np.empty((64, 64), np.float32)  # any shape with the right number of elements
    res = purlin.all_reduce(xs[c.rank], op="max", out=out)
    assert res is out
    assert_equal(out, want, "out=")
    # 2-D input keeps its shape
    y = purlin.all_reduce(xs[c.rank].reshape(64, 64))
    assert y.shape == (64, 64)
    assert_equal(y, ref_reduce(xs, ReduceOp.SUM, np.float32), "2-D")


@check()
def all_gather_fixed(c):
    for name in ("float32", "int8", "float64") + (("bfloat16",) if ml_dtypes else ()):
        dt = np_dtype(name)
        xs = [data(dt, 777, r, 20) for r in range(c.world)]
        got = purlin.all_gather(xs[c.rank])
        assert got.shape == (777 * c.world,) and got.dtype == dt
        assert_equal(got, np.concatenate(xs), "all_gather " + name)
    # 2-D: concatenated along dim 0
    xs = [data(np.int64, 12, r, 21).reshape(3, 4) for r in range(c.world)]
    got = purlin.all_gather(xs[c.rank])
    assert got.shape == (3 * c.world, 4), got.shape
    assert_equal(got, np.concatenate(xs), "all_gather 2-D")
    # in place: x is the whole output, this rank's part already at its slice
    buf = np.zeros(100 * c.world, np.float32)
    buf[c.rank * 100:(c.rank + 1) * 100] = c.rank + 1
    assert purlin.all_gather(buf, out=buf) is buf
    assert_equal(buf, np.repeat(np.arange(1, c.world + 1, dtype=np.float32), 100), "in place")
    # out= given, and the in-place form through a slice view
    out = np.empty(100 * c.world, np.float32)
    purlin.all_gather(np.full(100, c.rank, np.float32), out=out)
    assert_equal(out, np.repeat(np.arange(c.world, dtype=np.float32), 100), "out=")
    view = out[c.rank * 100:(c.rank + 1) * 100]
    view[:] = 2 * c.rank
    purlin.all_gather(view, out=out)
    assert_equal(out, np.repeat(2 * np.arange(c.world, dtype=np.float32), 100), "slice in place")


@check()
def reduce_scatter_fixed(c):
    n = 513
    for name in ("float32", "int32", "float16") + (("float8_e4m3fn",) if ml_dtypes else ()):
        dt = np_dtype(name)
        for op in (ReduceOp.SUM, ReduceOp.MIN, ReduceOp.AVG):
            xs = [data(dt, n * c.world, r, 30 + op) for r in range(c.world)]
            got = purlin.reduce_scatter(xs[c.rank], op=op)
            assert got.shape == (n,) and got.dtype == dt
            want = ref_reduce(xs, op, dt)[c.rank * n:(c.rank + 1) * n]
            assert_equal(got, want, "reduce_scatter %s %s" % (name, op.name),
                         rtol=tol(dt) if op == ReduceOp.AVG else 0)
    # 2-D: split along dim 0
    xs = [data(np.float64, 6 * c.world, r, 35).reshape(2 * c.world, 3) for r in range(c.world)]
    got = purlin.reduce_scatter(xs[c.rank])
    assert got.shape == (2, 3)
    assert_equal(got, ref_reduce(xs, ReduceOp.SUM, np.float64)[2 * c.rank:2 * c.rank + 2], "2-D")
    # in place: the result lands in x's own slice
    xs = [data(np.float32, n * c.world, r, 36) for r in range(c.world)]
    x = xs[c.rank].copy()
    mine = purlin.reduce_scatter(x, out=x, mode=ReductionMode.DETERMINISTIC)
    want = ref_reduce(xs, ReduceOp.SUM, np.float32)[c.rank * n:(c.rank + 1) * n]
    assert_equal(mine, want, "in place (returned slice)")
    assert_equal(x[c.rank * n:(c.rank + 1) * n], want, "in place (x's slice)")
    out = np.empty(n, np.float32)
    assert purlin.reduce_scatter(xs[c.rank], ReduceOp.SUM, out=out) is out
    assert_equal(out, want, "out=")


@check()
def all_to_all_fixed(c):
    n = 301
    for name in ("float32", "uint8", "int64"):
        dt = np_dtype(name)
        xs = [data(dt, n * c.world, r, 40) for r in range(c.world)]
        got = purlin.all_to_all(xs[c.rank])
        want = np.concatenate([xs[p][c.rank * n:(c.rank + 1) * n] for p in range(c.world)])
        assert got.shape == xs[c.rank].shape and got.dtype == dt
        assert_equal(got, want, "all_to_all " + name)
    x = xs[c.rank].copy()
    assert purlin.all_to_all(x, out=x) is x
    assert_equal(x, want, "in place")
    out = np.empty_like(x)
    purlin.all_to_all(xs[c.rank], out=out)
    assert_equal(out, want, "out=")


@check()
def all_gather_v_skewed(c):
    for k, counts in enumerate((skewed(c.world, 1000, 50), [0] * c.world,
                                [5 * (r + 1) for r in range(c.world)])):
        for name in ("float32", "int32") + (("bfloat16",) if ml_dtypes else ()):
            dt = np_dtype(name)
            xs = [data(dt, counts[r], r, 51 + k) for r in range(c.world)]
            got = purlin.all_gather_v(xs[c.rank], counts)
            assert got.shape == (sum(counts),) and got.dtype == dt
            assert_equal(got, np.concatenate(xs), "all_gather_v %s %s" % (name, counts))
    # rows of a 2-D array; counts as a numpy array and as a tuple
    counts = skewed(c.world, 40, 52)
    xs = [data(np.float64, counts[r] * 3, r, 53).reshape(counts[r], 3) for r in range(c.world)]
    got = purlin.all_gather_v(xs[c.rank], np.array(counts))
    assert got.shape == (sum(counts), 3), got.shape
    assert_equal(got, np.concatenate(xs), "2-D rows")
    out = np.empty((sum(counts), 3))
    assert purlin.all_gather_v(xs[c.rank], tuple(counts), out=out) is out
    assert_equal(out, np.concatenate(xs), "out=")
    # in place: x is the whole output, this rank's rows already in place
    full = np.zeros((sum(counts), 3))
    off = sum(counts[:c.rank])
    full[off:off + counts[c.rank]] = xs[c.rank]
    assert purlin.all_gather_v(full, counts, out=full) is full
    assert_equal(full, np.concatenate(xs), "in place")


@check()
def reduce_scatter_v_skewed(c):
    for k, counts in enumerate((skewed(c.world, 2000, 60), [3] * c.world)):
        for name, op in (("float32", ReduceOp.SUM), ("int64", ReduceOp.MAX),
                         ("float16", ReduceOp.PROD)):
            dt = np_dtype(name)
            xs = [data(dt, sum(counts), r, 61 + k) for r in range(c.world)]
            got = purlin.reduce_scatter_v(xs[c.rank], counts, op=op)
            off = sum(counts[:c.rank])
            want = ref_reduce(xs, op, dt)[off:off + counts[c.rank]]
            assert got.shape == (counts[c.rank],)
            assert_equal(got, want, "reduce_scatter_v %s %s %s" % (name, op.name, counts))
    # rows, deterministic mode, in place
    counts = skewed(c.world, 60, 62)
    xs = [data(np.float32, sum(counts) * 2, r, 63).reshape(sum(counts), 2) for r in range(c.world)]
    off = sum(counts[:c.rank])
    want = ref_reduce(xs, ReduceOp.SUM, np.float32)[off:off + counts[c.rank]]
    got = purlin.reduce_scatter_v(xs[c.rank], counts, mode=ReductionMode.DETERMINISTIC)
    assert got.shape == (counts[c.rank], 2)
    assert_equal(got, want, "2-D")
    x = xs[c.rank].copy()
    mine = purlin.reduce_scatter_v(x, counts, out=x)
    assert_equal(mine, want, "in place (returned slice)")
    assert_equal(x[off:off + counts[c.rank]], want, "in place (x's rows)")


def a2a_matrix(world, seed):
    """counts[i][j]: rows rank i sends to rank j (skewed, with zeros)."""
    rng = np.random.default_rng(seed)
    m = rng.zipf(1.6, size=(world, world)).clip(max=50) - 1
    m[rng.integers(0, world), rng.integers(0, world)] = 0
    return m.astype(int)


@check()
def all_to_all_v_skewed(c):
    m = a2a_matrix(c.world, 70)
    send, recv = [int(v) for v in m[c.rank]], [int(v) for v in m[:, c.rank]]
    for name in ("float32", "int8", "float64") + (("float8_e5m2",) if ml_dtypes else ()):
        dt = np_dtype(name)
        xs = [data(dt, int(m[r].sum()), r, 71) for r in range(c.world)]

        def block(p):  # rows rank p sends to me
            off = int(m[p, :c.rank].sum())
            return xs[p][off:off + int(m[p, c.rank])]

        want = np.concatenate([block(p) for p in range(c.world)])
        got = purlin.all_to_all_v(xs[c.rank], send, recv)
        assert got.shape == (sum(recv),) and got.dtype == dt
        assert_equal(got, want, "all_to_all_v " + name)
        # recv_counts=None: exchanged by purlin first
        assert_equal(purlin.all_to_all_v(xs[c.rank], np.array(send)), want, "recv_counts=None")
    # 2-D rows and out=
    xs = [data(np.int32, int(m[r].sum()) * 2, r, 72).reshape(-1, 2) for r in range(c.world)]
    want = np.concatenate([xs[p][int(m[p, :c.rank].sum()):][:int(m[p, c.rank])]
                           for p in range(c.world)])
    out = np.empty((sum(recv), 2), np.int32)
    assert purlin.all_to_all_v(xs[c.rank], send, recv, out=out) is out
    assert_equal(out, want, "2-D out=")
    # in place with symmetric counts
    sym = [3 + ((c.rank + p) % 3) for p in range(c.world)]  # sym[p] on rank r == sym[r] on p
    x = np.concatenate([np.full(sym[p], 100 * c.rank + p, np.int64) for p in range(c.world)])
    assert purlin.all_to_all_v(x, sym, sym, out=x) is x
    want = np.concatenate([np.full(sym[p], 100 * p + c.rank, np.int64) for p in range(c.world)])
    assert_equal(x, want, "in place")


@check()
def empty_zero_copy(c):
    a = purlin.empty((1000,), np.float32)
    b = purlin.empty(1000, "float32")
    assert isinstance(a, np.ndarray) and a.shape == (1000,) and a.dtype == np.float32
    a[:] = c.rank + 1
    purlin.all_reduce(a, out=b)
    assert_equal(b, np.full(1000, sum(range(1, c.world + 1)), np.float32), "peer memory")
    purlin.all_reduce(a, out=a, op=ReduceOp.MAX)
    assert_equal(a, np.full(1000, c.world, np.float32), "peer memory in place")
    g = purlin.empty((c.world, 8), np.int64)
    purlin.all_gather(np.full(8, c.rank, np.int64), out=g)
    assert_equal(g, np.repeat(np.arange(c.world), 8), "all_gather into peer memory")
    if ml_dtypes is not None:
        h = purlin.empty(64, ml_dtypes.bfloat16)
        h[:] = 1
        assert_equal(purlin.all_reduce(h), np.full(64, c.world), "bfloat16 peer memory")
        purlin.free(h)
    purlin.free(a)
    purlin.free(b)
    purlin.free(g)
    expect_raises(ValueError, lambda: purlin.free(np.zeros(4)), "purlin.empty")
    z = purlin.empty((0,), np.float32)
    assert z.size == 0


@check()
def buffer_protocol_inputs(c):
    x = array.array("f", [float(c.rank + 1)] * 10)
    got = purlin.all_reduce(x)  # output allocated as numpy
    assert_equal(got, np.full(10, sum(range(1, c.world + 1))), "array.array")
    out = array.array("f", [0.0] * 10)
    purlin.all_reduce(x, out=out)
    assert_equal(np.array(out), np.full(10, sum(range(1, c.world + 1))), "array.array out=")
    b = bytearray([c.rank] * 4)
    purlin.all_gather(b, out=(o := bytearray(4 * c.world)))
    assert list(o) == [r for r in range(c.world) for _ in range(4)], list(o)
    q = array.array("q", [c.rank] * 3)
    assert_equal(purlin.all_reduce(memoryview(q), op=ReduceOp.MAX), [c.world - 1] * 3, "memoryview")


@check()
def dlpack_inputs(c):
    class Wrapped:  # an object known only by its __dlpack__ (numpy's, underneath)
        def __init__(self, a):
            self.a = a

        def __dlpack__(self, stream=None):
            return self.a.__dlpack__()

        def __dlpack_device__(self):
            return self.a.__dlpack_device__()

    x = np.full(33, c.rank, np.int32)
    out = np.zeros(33, np.int32)
    purlin.all_reduce(Wrapped(x), out=Wrapped(out))
    assert_equal(out, np.full(33, sum(range(c.world))), "DLPack in and out")
    got = purlin.all_gather(Wrapped(x))
    assert isinstance(got, np.ndarray) and got.size == 33 * c.world


@check()
def errors_before_launch(c):
    x = np.ones(12, np.float32)
    # wrong dtype
    expect_raises(TypeError, lambda: purlin.all_reduce(np.ones(4, np.complex64)), "complex64",
                  "does not support")
    expect_raises(TypeError, lambda: purlin.all_reduce(np.ones(4, np.int16)), "int16")
    expect_raises(TypeError, lambda: purlin.all_reduce(np.ones(4, bool)), "bool")
    expect_raises(TypeError, lambda: purlin.all_reduce(x, out=np.ones(12, np.float64)),
                  "float64", "float32")
    expect_raises(TypeError, lambda: purlin.all_reduce(x.astype(">f4")), "big-endian")
    expect_raises(TypeError, lambda: purlin.all_reduce([1.0, 2.0]), "list")
    # non-contiguous
    expect_raises(ValueError, lambda: purlin.all_reduce(np.ones(24, np.float32)[::2]),
                  "not contiguous")
    expect_raises(ValueError, lambda: purlin.all_reduce(np.ones((4, 4), np.float32).T),
                  "not contiguous")
    expect_raises(ValueError, lambda: purlin.all_reduce(x, out=np.ones(24, np.float32)[::2]),
                  "out", "not contiguous")
    # sizes that do not fit
    expect_raises(ValueError, lambda: purlin.all_reduce(x, out=np.ones(13, np.float32)),
                  "13 elements", "12")
    expect_raises(ValueError, lambda: purlin.all_gather(x, out=np.ones(12 * c.world + 1,
                                                                       np.float32)),
                  "out has %d elements" % (12 * c.world + 1))
    if c.world > 1:
        expect_raises(ValueError,
                      lambda: purlin.reduce_scatter(np.ones(c.world * 5 + 1, np.float32)),
                      "not a multiple of world_size")
        expect_raises(ValueError, lambda: purlin.all_to_all(np.ones(c.world * 5 + 1, np.float32)),
                      "not a multiple of world_size")
    ro = np.ones(12, np.float32)
    ro.flags.writeable = False
    expect_raises(ValueError, lambda: purlin.all_reduce(x, out=ro), "read-only")
    # bad counts
    W = c.world
    expect_raises(ValueError, lambda: purlin.all_gather_v(x, [12] * (W + 1)), "one per rank")
    expect_raises(ValueError, lambda: purlin.all_gather_v(x, [-1] + [12] * (W - 1)), "negative")
    expect_raises(TypeError, lambda: purlin.all_gather_v(x, [1.5] * W), "integers")
    expect_raises(ValueError, lambda: purlin.all_gather_v(x, [11] * W), "counts[%d]" % c.rank)
    expect_raises(ValueError, lambda: purlin.reduce_scatter_v(x, [1] * W), "sum(counts)")
    expect_raises(ValueError, lambda: purlin.all_to_all_v(x, [1] * W, [1] * W), "send_counts")
    expect_raises(ValueError, lambda: purlin.all_to_all_v(x, [12] + [0] * (W - 1), [1] * W,
                                                          out=x), "send_counts == recv_counts")
    expect_raises(ValueError, lambda: purlin.all_gather_v(x, [12] * W, out=np.empty(5, np.float32)),
                  "out has 5 elements")
    # bad op / mode / stream
    expect_raises(TypeError, lambda: purlin.all_reduce(x, op="median"), "ReduceOp")
    expect_raises(TypeError, lambda: purlin.all_reduce(x, mode=7), "ReductionMode")
    expect_raises(ValueError, lambda: purlin.all_reduce(x, stream=1234), "stream")
    # a wrong device (a fake CUDA array): refused on the host datapath
    class FakeCuda:
        __cuda_array_interface__ = {"data": (0x1000, False), "typestr": "<f4", "shape": (4,),
                                    "strides": None, "version": 3}
    expect_raises(ValueError, lambda: purlin.all_reduce(FakeCuda()), "host datapath")
    # nothing was launched: the communicator is fine
    assert_equal(purlin.all_reduce(x), np.full(12, c.world), "after the errors")


@check()
def c_errors_become_purlin_error(c):
    if c.world > 1:
        disagreements(c)
    # an argument the C library refuses: overlapping send and recv (not the in-place form)
    buf = np.zeros(20, np.float32)
    e = expect_raises(PurlinError, lambda: purlin.all_reduce(buf[0:10], out=buf[5:15]))
    assert e.status == "PURLIN_ERR_INVALID_ARGUMENT", e.status
    assert "overlap" in e.text, e.text
    assert_equal(purlin.all_reduce(np.ones(3, np.float32)), np.full(3, c.world), "after")


def disagreements(c):
    # ranks disagree on the count: MISMATCH on every rank, and the communicator stays usable
    e = expect_raises(PurlinError, lambda: purlin.all_reduce(np.ones(10 + c.rank, np.float32)))
    assert e.status == "PURLIN_ERR_MISMATCH", e.status
    assert e.code == -3 and e.text and e.text in str(e), (e.code, e.text, str(e))
    assert "count" in e.text, e.text
    # ranks disagree on the dtype
    dt = np.float32 if c.rank % 2 == 0 else np.int32
    e = expect_raises(PurlinError, lambda: purlin.all_reduce(np.ones(16, dt)))
    assert e.status == "PURLIN_ERR_MISMATCH", e.status
    # ranks disagree on the op
    op = ReduceOp.SUM if c.rank == 0 else ReduceOp.MAX
    e = expect_raises(PurlinError, lambda: purlin.all_reduce(np.ones(16, np.float32), op=op))
    assert e.status == "PURLIN_ERR_MISMATCH", e.status
    assert_equal(purlin.all_reduce(np.ones(16, np.float32)), np.full(16, c.world), "after")
    # V variant: ranks disagree on the counts
    counts = [2] * c.world
    counts[0] += c.rank % 2
    e = expect_raises(PurlinError, lambda: purlin.all_gather_v(np.ones(counts[c.rank]), counts))
    assert e.status == "PURLIN_ERR_MISMATCH", e.status


@check()
def communicator_object(c):
    comm = purlin._default_comm()
    assert comm.rank() == c.rank and comm.world_size() == c.world
    assert comm.datapath == "host" and comm.device == "cpu" and purlin.device() == "cpu"
    assert purlin.get_async_error() is None
    assert comm.last_error() is not None


# ---- fault suite -------------------------------------------------------------------------------

@check("fault")
def timeout_names_the_missing_rank(c):
    """Rank 1 never calls: the others get TIMEOUT (or REMOTE), naming it, within the deadline."""
    if c.rank == 1:
        time.sleep(float(os.environ.get("PURLIN_TIMEOUT_MS", "2000")) / 1000 + 3)
        return
    t0 = time.monotonic()
    e = expect_raises(PurlinError, lambda: purlin.all_reduce(np.ones(64, np.float32)))
    assert e.status in ("PURLIN_ERR_TIMEOUT", "PURLIN_ERR_REMOTE"), e.status
    assert "1" in e.text, e.text
    assert time.monotonic() - t0 < 30
    # the communicator is aborted now: later calls are refused
    e = expect_raises(PurlinError, lambda: purlin.all_reduce(np.ones(4, np.float32)))
    assert e.status == "PURLIN_ERR_INVALID_USAGE", e.status
    assert purlin.get_async_error() is not None


# ---- torch suite (torch CPU on the host datapath) ---------------------------------------------

def _torch():
    import torch

    return torch


@check("torch")
def torch_every_collective(c):
    torch = _torch()
    W, r = c.world, c.rank
    for dt, npdt in ((torch.float32, np.float32), (torch.int64, np.int64),
                     (torch.bfloat16, None), (torch.float16, np.float16)):
        def t(n, rank, seed):
            return torch.from_numpy(data(np.float32, n, rank, seed)).to(dt)

        def f64(x):
            return x.to(torch.float64).numpy()

        xs = [t(1001, p, 100) for p in range(W)]
        got = purlin.all_reduce(xs[r])
        assert isinstance(got, torch.Tensor) and got.dtype == dt
        assert_equal(f64(got), sum(f64(x) for x in xs), "all_reduce %s" % dt)
        got = purlin.all_gather(xs[r])
        assert got.shape == (1001 * W,)
        assert_equal(f64(got), np.concatenate([f64(x) for x in xs]), "all_gather %s" % dt)
        xs = [t(64 * W, p, 101) for p in range(W)]
        got = purlin.reduce_scatter(xs[r], op=ReduceOp.MAX)
        assert_equal(f64(got), np.max([f64(x) for x in xs], 0)[64 * r:64 * (r + 1)],
                     "reduce_scatter %s" % dt)
        got = purlin.all_to_all(xs[r])
        assert_equal(f64(got), np.concatenate([f64(xs[p])[64 * r:64 * (r + 1)] for p in range(W)]),
                     "all_to_all %s" % dt)
        counts = skewed(W, 300, 102)
        xs = [t(counts[p], p, 103) for p in range(W)]
        got = purlin.all_gather_v(xs[r], torch.tensor(counts))  # counts as a CPU tensor
        assert_equal(f64(got), np.concatenate([f64(x) for x in xs]), "all_gather_v %s" % dt)
        xs = [t(sum(counts), p, 104) for p in range(W)]
        got = purlin.reduce_scatter_v(xs[r], counts)
        off = sum(counts[:r])
        assert_equal(f64(got), sum(f64(x) for x in xs)[off:off + counts[r]],
                     "reduce_scatter_v %s" % dt)
        m = a2a_matrix(W, 105)
        xs = [t(int(m[p].sum()), p, 106) for p in range(W)]
        got = purlin.all_to_all_v(xs[r], torch.tensor(m[r]), torch.tensor(m[:, r]))
        want = np.concatenate([f64(xs[p])[int(m[p, :r].sum()):][:int(m[p, r])] for p in range(W)])
        assert_equal(f64(got), want, "all_to_all_v %s" % dt)


@check("torch")
def torch_in_place_out_and_errors(c):
    torch = _torch()
    x = torch.full((8, 8), float(c.rank))
    assert purlin.all_reduce(x, out=x) is x
    assert (x == sum(range(c.world))).all()
    out = torch.empty(64)
    assert purlin.all_reduce(torch.ones(64), out=out) is out and (out == c.world).all()
    expect_raises(ValueError, lambda: purlin.all_reduce(torch.ones(8, 8).t()), "not contiguous")
    expect_raises(TypeError, lambda: purlin.all_reduce(torch.ones(8, dtype=torch.int16)), "int16")
    expect_raises(TypeError, lambda: purlin.all_reduce(torch.ones(4), out=torch.ones(4).double()),
                  "dtype")
    expect_raises(ValueError, lambda: purlin.all_reduce(torch.ones(4), out=torch.ones(5)),
                  "5 elements")
    expect_raises(ValueError, lambda: purlin.all_reduce(torch.ones(4, device="meta")), "meta")
    # peer memory as a torch CPU tensor
    e = purlin.empty((4, 4), torch.float32)
    assert isinstance(e, torch.Tensor) and e.shape == (4, 4)
    e.fill_(1)
    purlin.all_reduce(e, out=e)
    assert (e == c.world).all()
    purlin.free(e)


@check("torch")
def torch_custom_ops_and_compile(c):
    torch = _torch()
    from purlin import _torch as ops

    assert ops.register(), "torch.library.custom_op is missing"
    x = torch.full((16,), float(c.rank + 1))
    y = torch.ops.purlin.all_reduce(x, int(ReduceOp.SUM), 0)
    assert (y == sum(range(1, c.world + 1))).all()
    torch.ops.purlin.all_reduce_(x, int(ReduceOp.MAX), 0)
    assert (x == c.world).all()
    assert torch.ops.purlin.all_gather(torch.ones(2)).shape == (2 * c.world,)

    def f(t):
        return purlin.all_reduce(t * 2) + 1

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)  # no graph break allowed
    got = compiled(torch.full((32,), float(c.rank)))
    assert (got == 2 * sum(range(c.world)) + 1).all(), got

    def g(t):
        return purlin.reduce_scatter(purlin.all_gather(t)) * 1

    got = torch.compile(g, backend="aot_eager", fullgraph=True)(torch.full((4,), float(c.rank)))
    assert got.shape == (4,)
    # all_gather(t) holds every rank's t; its block r reduced over W ranks is W * t_r
    assert (got == c.world * c.rank).all(), got


@check("torch")
def torch_beside_torch_distributed(c):
    """purlin and torch.distributed (gloo) in one program agree on random data."""
    torch = _torch()
    import torch.distributed as dist

    if not dist.is_available():
        return
    if not dist.is_initialized():
        path = os.environ["PURLIN_TEST_GLOO_FILE"]
        dist.init_process_group("gloo", init_method="file://" + path, rank=c.rank,
                                world_size=c.world)
    gen = torch.Generator().manual_seed(1000 + c.rank)
    x = torch.randn(4096, generator=gen)
    ref = x.clone()
    dist.all_reduce(ref)
    got = purlin.all_reduce(x, mode=ReductionMode.DETERMINISTIC)
    assert torch.allclose(got, ref, rtol=1e-5, atol=1e-5)
    parts = [torch.empty_like(x) for _ in range(c.world)]
    dist.all_gather(parts, x)
    assert torch.equal(purlin.all_gather(x), torch.cat(parts))
    # a second communicator whose unique id purlin broadcasts over the process group itself
    for kw in ({"group": dist.group.WORLD}, {"rank": c.rank, "world_size": c.world}):
        comm = purlin.Communicator(device="cpu", **kw)
        try:
            assert comm.rank() == c.rank and comm.world_size() == c.world
            assert torch.equal(comm.all_reduce(torch.ones(5)), torch.full((5,), float(c.world)))
        finally:
            comm.finalize()
    dist.destroy_process_group()


# ---- cuda suite (the GPU machine: torch CUDA tensors on the GPU datapath) ---------------------

def _cuda_ref_inputs(torch, world, n, seed, dtype, device="cpu"):
    """Every rank's random input (normal), the same on every rank."""
    out = []
    for r in range(world):
        g = torch.Generator().manual_seed(seed * 1009 + r)
        out.append(torch.randn(n, generator=g).to(dtype).to(device))
    return out


def _close(torch, got, want, dtype, what):
    got = got.detach().float().cpu()
    want = want.detach().float().cpu()
    assert got.shape == want.shape, "%s: shape %s, expected %s" % (what, got.shape, want.shape)
    rtol, atol = (2e-2, 2e-2) if dtype == torch.bfloat16 else (1e-5, 1e-5)
    if not torch.allclose(got, want, rtol=rtol, atol=atol):
        d = (got - want).abs()
        i = int(d.argmax())
        raise AssertionError("%s: element %d is %r, expected %r" % (what, i, float(got.view(-1)[i]),
                                                                    float(want.view(-1)[i])))


@check("cuda")
def cuda_seven_collectives_vs_gloo(c):
    """All seven collectives on random CUDA tensors, bf16 and f32, against torch.distributed
    (gloo) on CPU float32 copies."""
    torch = _torch()
    import torch.distributed as dist

    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method="file://" + os.environ["PURLIN_TEST_GLOO_FILE"],
                                rank=c.rank, world_size=c.world)
    W, r, dev = c.world, c.rank, purlin.device()

    def gloo_sum(t):
        t = t.float().cpu().clone()
        dist.all_reduce(t)
        return t

    def gloo_gather(t, sizes):
        t = t.float().cpu()
        pad = torch.zeros(max(max(sizes), 1))
        pad[:t.numel()] = t
        parts = [torch.empty_like(pad) for _ in range(W)]
        dist.all_gather(parts, pad)
        return torch.cat([p[:k] for p, k in zip(parts, sizes)])

    for dt in (torch.float32, torch.bfloat16):
        for n in (1000, 1 << 20):
            seed = 7 + n
            x = _cuda_ref_inputs(torch, W, W * n, seed, dt)[r].to(dev)
            _close(torch, purlin.all_reduce(x), gloo_sum(x), dt, "all_reduce %s n=%d" % (dt, n))
            _close(torch, purlin.all_gather(x[:n]), gloo_gather(x[:n], [n] * W), dt,
                   "all_gather %s" % dt)
            _close(torch, purlin.reduce_scatter(x), gloo_sum(x)[r * n:(r + 1) * n], dt,
                   "reduce_scatter %s" % dt)
            got = purlin.all_to_all(x)
            full = gloo_gather(x, [W * n] * W).view(W, W, n)  # [sender, block, n]
            _close(torch, got, full[:, r].reshape(-1), dt, "all_to_all %s" % dt)
            counts = skewed(W, n, seed)
            off = sum(counts[:r])
            _close(torch, purlin.all_gather_v(x[:counts[r]], counts),
                   gloo_gather(x[:counts[r]], counts), dt, "all_gather_v %s" % dt)
            xs = x[:sum(counts)]
            _close(torch, purlin.reduce_scatter_v(xs, counts),
                   gloo_sum(xs)[off:off + counts[r]], dt, "reduce_scatter_v %s" % dt)
            m = a2a_matrix(W, seed)
            send, recv = [int(v) for v in m[r]], [int(v) for v in m[:, r]]
            xa = x[:sum(send)]
            sizes = [int(m[p].sum()) for p in range(W)]
            allx = gloo_gather(xa, sizes)
            starts = [sum(sizes[:p]) for p in range(W)]
            want = torch.cat([allx[starts[p] + int(m[p, :r].sum()):][:int(m[p, r])]
                              for p in range(W)])
            _close(torch, purlin.all_to_all_v(xa, send, recv), want, dt, "all_to_all_v %s" % dt)
    dist.destroy_process_group()


@check("cuda")
def cuda_graph_capture_and_replay(c):
    torch = _torch()
    dev = purlin.device()
    x = torch.zeros(1 << 16, device=dev)
    y = torch.empty_like(x)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture, as torch asks
        purlin.all_reduce(x, out=y)
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        purlin.all_reduce(x, out=y)
        z = purlin.all_gather(x[:16])  # output allocated inside the capture (graph pool)
    for k in range(3):
        x.fill_(float(c.rank + 1 + k))
        g.replay()
        torch.cuda.synchronize()
        want = sum(r + 1 + k for r in range(c.world))
        assert bool((y == want).all()), "replay %d: %s, expected %s" % (k, y[:4], want)
        assert z.shape == (16 * c.world,)
        assert bool((z.view(c.world, 16) == torch.arange(1, c.world + 1, device=dev)
                     .float().add(k).view(-1, 1)).all()), z


@check("cuda")
def cuda_device_counts_capturable(c):
    """V variants with counts in device memory (int64 CUDA tensors), and one captured in a graph.
    Until the library reads counts on the device (purlin._core.DEVICE_COUNTS), Python copies them
    to the host first."""
    torch = _torch()
    dev = purlin.device()
    W, r = c.world, c.rank
    counts = [3 * (p + 1) for p in range(W)]
    dcounts = torch.tensor(counts, dtype=torch.int64, device=dev)
    x = torch.full((counts[r],), float(r), device=dev)
    out = torch.empty(sum(counts), device=dev)
    purlin.all_gather_v(x, dcounts, out=out)
    torch.cuda.synchronize()
    gathered = torch.cat([torch.full((counts[p],), float(p)) for p in range(W)])
    assert torch.equal(out.cpu(), gathered), out
    # captured: device counts when the library reads them there, host counts otherwise (the
    # same counts on every replay)
    from purlin import _core

    gcounts = dcounts if _core.DEVICE_COUNTS else counts
    big = torch.ones(sum(counts), device=dev)
    mine = torch.empty(counts[r], device=dev)
    g = torch.cuda.CUDAGraph()
    purlin.reduce_scatter_v(big, gcounts, out=mine)
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        purlin.reduce_scatter_v(big, gcounts, out=mine)
    big.fill_(2.0)
    g.replay()
    torch.cuda.synchronize()
    assert bool((mine == 2.0 * W).all()), mine
    sym = torch.full((W,), 2, dtype=torch.int64, device=dev)
    a = torch.arange(2 * W, device=dev, dtype=torch.float32) + 100 * r
    o = torch.empty_like(a)
    purlin.all_to_all_v(a, sym, sym, out=o)
    torch.cuda.synchronize()
    want = torch.cat([torch.arange(2 * r, 2 * r + 2).float() + 100 * p for p in range(W)])
    assert torch.equal(o.cpu(), want), o
    if _core.DEVICE_COUNTS:
        expect_raises(ValueError, lambda: purlin.all_gather_v(x, dcounts), "out=")
    else:  # copied to the host: the output can be allocated
        assert torch.equal(purlin.all_gather_v(x, dcounts).cpu(), gathered)


@check("cuda")
def cuda_all_to_all_v_device_splits_graph(c):
    """all_to_all_v with splits in device memory captured in torch.cuda.graph: new splits are
    written into the same tensors between replays, and every replay's output is checked."""
    torch = _torch()
    dev = purlin.device()
    W, r = c.world, c.rank
    cap = 64 * W  # room of x and out, in elements

    def splits(k):  # k-th configuration: rank s sends sc(s, p) elements to rank p
        return [[(3 * s + 5 * p + 7 * k) % 11 + (k % 3) * 9 for p in range(W)] for s in range(W)]

    sc = torch.zeros(W, dtype=torch.int64, device=dev)
    rc = torch.zeros(W, dtype=torch.int64, device=dev)
    x = torch.zeros(cap, device=dev)
    out = torch.zeros(cap, device=dev)

    def load(k):
        m = splits(k)
        sc.copy_(torch.tensor(m[r], dtype=torch.int64))
        rc.copy_(torch.tensor([m[p][r] for p in range(W)], dtype=torch.int64))
        n = sum(m[r])
        x.zero_()
        x[:n] = torch.arange(n, dtype=torch.float32, device=dev) + 1000 * r
        out.fill_(-1.0)
        want = []
        for p in range(W):  # rank p's block for me starts at sum(m[p][:r]) of its x
            off = sum(m[p][:r])
            want.append(torch.arange(off, off + m[p][r], dtype=torch.float32) + 1000 * p)
        return torch.cat(want)

    load(0)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture, as torch asks
        purlin.all_to_all_v(x, sc, rc, out=out)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        purlin.all_to_all_v(x, sc, rc, out=out)
    for k in range(1, 6):
        want = load(k)
        torch.cuda.synchronize()
        g.replay()
        torch.cuda.synchronize()
        got = out.cpu()
        assert torch.equal(got[:want.numel()], want), "replay %d: %s, expected %s" % (
            k, got[:want.numel()], want)
        assert bool((got[want.numel():] == -1.0).all()), "replay %d wrote past its blocks" % k
    # the splits must be int64 and contiguous, on this device
    expect_raises(TypeError, lambda: purlin.all_to_all_v(x, sc.int(), rc.int(), out=out), "int64")
    two = torch.zeros(2 * W, dtype=torch.int64, device=dev)
    expect_raises(ValueError, lambda: purlin.all_to_all_v(x, two[::2], two[1::2], out=out),
                  "contiguous")


@check("cuda")
def cuda_streams_peer_memory_and_errors(c):
    torch = _torch()
    dev = purlin.device()
    s = torch.cuda.Stream()
    x = torch.full((4096,), float(c.rank), device=dev)
    with torch.cuda.stream(s):
        y = purlin.all_reduce(x)  # on s: torch's current stream there
    s.synchronize()
    assert bool((y == sum(range(c.world))).all())
    y2 = purlin.all_reduce(x, stream=s)
    s.synchronize()
    assert bool((y2 == sum(range(c.world))).all())
    e = purlin.empty((64, 64), torch.bfloat16)
    assert e.is_cuda and e.dtype == torch.bfloat16 and e.shape == (64, 64)
    e.fill_(1)
    purlin.all_reduce(e, out=e)
    torch.cuda.synchronize()
    assert bool((e == c.world).all())
    purlin.free(e)
    expect_raises(ValueError, lambda: purlin.all_reduce(torch.ones(8)), "cpu")
    expect_raises(ValueError, lambda: purlin.all_reduce(torch.ones(8, 8, device=dev).t()),
                  "not contiguous")
    expect_raises(TypeError, lambda: purlin.all_reduce(torch.ones(8, device=dev,
                                                                  dtype=torch.int16)), "int16")
    expect_raises(ValueError, lambda: purlin.all_reduce(np.ones(8, np.float32)), "cpu")
    assert purlin.get_async_error() is None


@check("cuda")
def cuda_registered_torch_tensors(c):
    """Tensors of PyTorch's caching allocator registered (purlin.register: zero copy through
    CUDA IPC), large enough for the direct kernel: AllReduce in place and out, AllGather and
    AllToAll, random inputs against a reference, outputs poisoned first; then the refusals."""
    torch = _torch()
    dev = purlin.device()
    W, n = c.world, 1 << 20  # 4 MiB of f32: above the packet sizes
    ins = _cuda_ref_inputs(torch, W, n, 77, torch.float32)
    x = ins[c.rank].to(dev)
    out = torch.full((n,), float("nan"), device=dev)
    g = torch.full((W * (n // W),), float("nan"), device=dev)
    a = torch.full((n,), float("nan"), device=dev)
    for t in (x, out, g, a):
        purlin.register(t)
    purlin.all_reduce(x, out=out)
    want = torch.stack([i.double() for i in ins]).sum(0)
    purlin.all_gather(x[: n // W], out=g)
    purlin.all_to_all(x, out=a)
    torch.cuda.synchronize()
    _close(torch, out, want, torch.float32, "registered all_reduce")
    _close(torch, g, torch.cat([i[: n // W] for i in ins]), torch.float32, "registered all_gather")
    blk = n // W
    _close(torch, a, torch.cat([ins[r][c.rank * blk:(c.rank + 1) * blk] for r in range(W)]),
           torch.float32, "registered all_to_all")
    y = x.clone()
    purlin.register(y)
    purlin.all_reduce(y, out=y)  # in place on a registered tensor
    torch.cuda.synchronize()
    _close(torch, y, want, torch.float32, "registered all_reduce in place")
    expect_raises(purlin.PurlinError, lambda: purlin.register(y[10:20]), "overlaps")
    expect_raises(ValueError, lambda: purlin.deregister(torch.ones(4, device=dev)), "register")
    for t in (x, out, g, a, y):
        purlin.deregister(t)
    assert purlin.get_async_error() is None


@check("cuda")
def cuda_torch_compile(c):
    torch = _torch()
    dev = purlin.device()

    def f(t):
        return purlin.all_reduce(t.sin() * 0 + t) * 2

    for backend in ("aot_eager", "inductor"):
        got = torch.compile(f, backend=backend, fullgraph=True)(
            torch.full((256,), float(c.rank), device=dev))
        torch.cuda.synchronize()
        assert bool((got == 2 * sum(range(c.world))).all()), (backend, got[:4])


@check("cuda")
def cuda_other_array_libraries(c):
    torch = _torch()
    try:
        import cupy
    except ImportError:
        return
    with cupy.cuda.Device(torch.device(purlin.device()).index or 0):
        x = cupy.full(100, c.rank + 1, dtype=cupy.float32)
        torch.cuda.synchronize()
        y = purlin.all_reduce(x, stream=cupy.cuda.get_current_stream())  # DLPack
        cupy.cuda.get_current_stream().synchronize()
        assert float(cupy.asnumpy(y).min()) == sum(range(1, c.world + 1)), type(y)


@check("cuda")
def cuda_deterministic_matches_host_datapath(c):
    """DETERMINISTIC all_reduce gives the same bits on the GPU and on the host datapath."""
    torch = _torch()
    dev = purlin.device()
    idbuf = torch.zeros(128, dtype=torch.uint8, device=dev)
    if c.rank == 0:
        idbuf.copy_(torch.frombuffer(bytearray(purlin.get_unique_id()), dtype=torch.uint8))
    uid = bytes(purlin.all_reduce(idbuf, op=ReduceOp.MAX).cpu().numpy().tobytes())
    host = purlin.Communicator(c.rank, c.world, device="cpu", unique_id=uid)
    try:
        for n in (1000, 300_001):
            g = torch.Generator().manual_seed(55 + c.rank)
            x = torch.randn(n, generator=g)
            a = purlin.all_reduce(x.to(dev), mode=ReductionMode.DETERMINISTIC).cpu()
            b = host.all_reduce(x, mode=ReductionMode.DETERMINISTIC)
            assert torch.equal(a.view(torch.int32), b.view(torch.int32)), \
                "n=%d: GPU and host bits differ at %d elements" % (n, int((a != b).sum()))
    finally:
        host.finalize()
