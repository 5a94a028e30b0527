#!/usr/bin/env python3
"""purlin quickstart: every collective on every rank, checked, one line each.

    torchrun --nproc-per-node 4 quickstart.py       # GPUs: CUDA tensors on torch's current stream
    purlinrun -n 4 python quickstart.py             # no GPU: the host datapath (processes, host
                                                    # memory) with torch CPU tensors, or numpy

Install first: pip install ./python (at the repository root). Results are checked against
torch.distributed with the gloo backend when torch is installed, else against a numpy reference
that every rank computes from every rank's (seeded) inputs. Options: --count N elements per rank
(default 1M), --dtype float32|bfloat16|float16 (default float32), --iters N (timing), --numpy
(numpy arrays even when torch is installed). Exits 1 if any rank saw a wrong result.
"""

import argparse
import hashlib
import os
import sys
import tempfile
import time

import purlin


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--count", type=int, default=1 << 20, help="elements per rank")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--iters", type=int, default=5, help="timed calls per collective")
    p.add_argument("--numpy", action="store_true", help="numpy arrays, numpy reference")
    return p.parse_args()


def zipf_counts(world, total, seed):
    """Skewed split sizes (Zipf, exponent 0.125 as the original's benchmarks), the same on every
    rank; at least one element each."""
    import random

    rng = random.Random(seed)
    w = [1.0 / (k + 1) ** 0.125 for k in range(world)]
    rng.shuffle(w)
    c = [max(1, int(total * x / sum(w))) for x in w]
    return c


class Backend:
    """Arrays of one library (torch or numpy), on the rank's device."""

    def __init__(self, use_torch, device, dtype):
        self.torch = use_torch
        self.device = device
        self.dtype_name = dtype
        if use_torch:
            import torch

            self.t = torch
            self.dtype = getattr(torch, dtype)
        else:
            import numpy as np

            self.np = np
            if dtype == "bfloat16":
                import ml_dtypes

                self.dtype = np.dtype(ml_dtypes.bfloat16)
            else:
                self.dtype = np.dtype(dtype)

    def inputs(self, n, rank, seed):
        """Small integers (exact in every dtype and every order of summation)."""
        if self.torch:
            g = self.t.Generator().manual_seed(seed * 1009 + rank)
            x = self.t.randint(-4, 5, (n,), generator=g).to(self.dtype)
            return x.to(self.device)
        rng = self.np.random.default_rng(seed * 1009 + rank)
        return rng.integers(-4, 5, size=n).astype(self.np.float32).astype(self.dtype)

    def host64(self, x):
        if self.torch:
            return x.detach().to("cpu", self.t.float64)
        return x.astype(self.np.float64)

    def equal(self, a, b):
        a, b = self.host64(a), self.host64(b)
        if self.torch:
            return a.shape == b.shape and bool(self.t.equal(a, b))
        return a.shape == b.shape and bool((a == b).all())

    def sync(self):
        if self.torch and str(self.device).startswith("cuda"):
            self.t.cuda.synchronize()


class GlooReference:
    """The expected results, from torch.distributed (gloo) on CPU copies (float64: exact)."""

    name = "torch.distributed (gloo)"

    def __init__(self, be, rank, world):
        import torch
        import torch.distributed as dist

        self.be, self.t, self.dist, self.rank, self.world = be, torch, dist, rank, world
        if not dist.is_initialized():
            if "MASTER_ADDR" in os.environ:  # torchrun
                dist.init_process_group("gloo")
            else:  # purlinrun: a file store named after the run's unique id
                key = hashlib.sha256(os.environ.get("PURLIN_UNIQUE_ID", "x").encode()).hexdigest()
                path = os.path.join(tempfile.gettempdir(), "purlin-quickstart-" + key[:16])
                dist.init_process_group("gloo", init_method="file://" + path, rank=rank,
                                        world_size=world)
                self.path = path

    def cpu(self, x):
        return self.be.host64(x).clone()

    def all_reduce(self, x):
        y = self.cpu(x)
        self.dist.all_reduce(y)
        return y

    def all_gather(self, x):
        y = self.cpu(x)
        parts = [self.t.empty_like(y) for _ in range(self.world)]
        self.dist.all_gather(parts, y)
        return self.t.cat(parts)

    def reduce_scatter(self, x, counts):
        s = self.all_reduce(x)  # gloo has no reduce_scatter: all_reduce, then this rank's slice
        off = sum(counts[:self.rank])
        return s[off:off + counts[self.rank]]

    def all_gather_v(self, x, counts):
        y = self.cpu(x)
        pad = self.t.zeros(max(counts), dtype=y.dtype)
        pad[:y.numel()] = y
        parts = [self.t.empty_like(pad) for _ in range(self.world)]
        self.dist.all_gather(parts, pad)
        return self.t.cat([p[:c] for p, c in zip(parts, counts)])

    def all_to_all_v(self, x, send, recv):
        y = self.cpu(x)
        out = self.t.empty(sum(recv), dtype=y.dtype)
        self.dist.all_to_all_single(out, y, recv, send)
        return out

    def close(self):
        self.dist.barrier()
        self.dist.destroy_process_group()
        if getattr(self, "path", None) and self.rank == 0:
            try:
                os.unlink(self.path)
            except OSError:
                pass


class NumpyReference:
    """The expected results, computed locally from every rank's seeded inputs."""

    name = "numpy reference"

    def __init__(self, be, rank, world):
        self.be, self.np, self.rank, self.world = be, be.np, rank, world
        self.seed = None

    def _all(self, n=None, sizes=None):
        sizes = sizes or [n] * self.world
        return [self.be.inputs(sizes[r], r, self.seed).astype(self.np.float64)
                for r in range(self.world)]

    def all_reduce(self, x):
        return sum(self._all(x.size))

    def all_gather(self, x):
        return self.np.concatenate(self._all(x.size))

    def reduce_scatter(self, x, counts):
        off = sum(counts[:self.rank])
        return sum(self._all(x.size))[off:off + counts[self.rank]]

    def all_gather_v(self, x, counts):
        return self.np.concatenate(self._all(sizes=counts))

    def all_to_all_v(self, x, send, recv, matrix):
        xs = self._all(sizes=[sum(row) for row in matrix])
        return self.np.concatenate([xs[p][sum(matrix[p][:self.rank]):][:matrix[p][self.rank]]
                                    for p in range(self.world)])

    def close(self):
        pass


def main():
    args = parse()
    use_torch = not args.numpy
    if use_torch:
        try:
            import torch
        except ImportError:
            use_torch = False
    purlin.init()
    rank, world = purlin.rank(), purlin.world_size()
    device = purlin.device()
    if use_torch and device.startswith("cuda"):
        torch.cuda.set_device(device)
    be = Backend(use_torch, device, args.dtype)
    ref = GlooReference(be, rank, world) if use_torch else NumpyReference(be, rank, world)
    n = max(world, args.count - args.count % world)  # a multiple of world_size
    if rank == 0:
        print("purlin %s: %d ranks, %s datapath (%s), %s %s, %d elements per rank, checked "
              "against %s" % (purlin.__version__, world, purlin.datapath(), device,
                              "torch" if use_torch else "numpy", args.dtype, n, ref.name),
              flush=True)

    block = [n // world] * world
    vcounts = zipf_counts(world, n, 7)
    matrix = [zipf_counts(world, n // world, 100 + r) for r in range(world)]  # rows: senders
    send = matrix[rank]
    recv = [matrix[p][rank] for p in range(world)]

    def timed(fn):
        fn()  # warm up
        be.sync()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            out = fn()
        be.sync()
        return out, (time.perf_counter() - t0) / max(1, args.iters) * 1e3

    cases = [
        ("all_reduce", n, lambda x: purlin.all_reduce(x), lambda x: ref.all_reduce(x)),
        ("all_gather", n // world, lambda x: purlin.all_gather(x), lambda x: ref.all_gather(x)),
        ("reduce_scatter", n, lambda x: purlin.reduce_scatter(x),
         lambda x: ref.reduce_scatter(x, block)),
        ("all_to_all", n, lambda x: purlin.all_to_all(x), lambda x: ref.all_to_all_v(
            x, block, block, [block] * world) if isinstance(ref, NumpyReference)
         else ref.all_to_all_v(x, block, block)),
        ("all_gather_v", vcounts[rank], lambda x: purlin.all_gather_v(x, vcounts),
         lambda x: ref.all_gather_v(x, vcounts)),
        ("reduce_scatter_v", sum(vcounts), lambda x: purlin.reduce_scatter_v(x, vcounts),
         lambda x: ref.reduce_scatter(x, vcounts)),
        ("all_to_all_v", sum(send), lambda x: purlin.all_to_all_v(x, send, recv),
         lambda x: ref.all_to_all_v(x, send, recv, matrix) if isinstance(ref, NumpyReference)
         else ref.all_to_all_v(x, send, recv)),
    ]
    # zero copy: the same all_reduce with its input in peer-accessible memory (purlin.empty)
    peer = purlin.empty((n,), be.dtype)
    cases.append(("all_reduce (peer)", n, lambda x: purlin.all_reduce(peer),
                  lambda x: ref.all_reduce(x)))

    failed = 0
    for seed, (name, count, run, expect) in enumerate(cases, start=1):
        ref.seed = seed
        x = be.inputs(count, rank, seed)
        peer[:] = x if name == "all_reduce (peer)" else 0
        got, ms = timed(lambda: run(x))
        ok = be.equal(got, expect(x))
        if not ok:
            print("rank %d: %s: wrong result" % (rank, name), file=sys.stderr, flush=True)
        # did any rank see a wrong result? (a MAX all_reduce of one flag)
        flag = be.inputs(1, 0, 0) * 0 + (0 if ok else 1)
        any_bad = float(purlin.all_reduce(flag, op=purlin.ReduceOp.MAX)[0]) != 0
        failed += any_bad
        if rank == 0:
            print("%-17s %9d elements  %-4s %9.3f ms" % (name, count, "FAIL" if any_bad else "ok",
                                                       ms), flush=True)
    purlin.free(peer)
    ref.close()
    purlin.finalize()
    if failed:
        if rank == 0:
            print("%d of %d collectives FAILED" % (failed, len(cases)), file=sys.stderr)
        sys.exit(1)
    if rank == 0:
        print("all %d checks passed on %d ranks" % (len(cases), world))


if __name__ == "__main__":
    main()
