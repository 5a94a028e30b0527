"""The communicator and its collectives, in PyTorch's conventions.

Every argument is checked here, before anything is launched: a wrong dtype is a TypeError, a
non-contiguous array, a wrong device or a size that does not fit is a ValueError, each saying what
and why. What the C library refuses or what fails across ranks (MISMATCH, TIMEOUT, REMOTE) is a
purlin.PurlinError carrying .status and the communicator's last-error text.
"""

import enum
import operator
import os
import sys
import warnings
import weakref

from . import _C
from . import _arrays as A


class ReduceOp(enum.IntEnum):
    """Reduction operators (purlin_op_t). AVG is SUM divided by the number of ranks."""

    SUM = 0
    PROD = 1
    MIN = 2
    MAX = 3
    AVG = 4


class ReductionMode(enum.IntEnum):
    """DETERMINISTIC: one accumulator per element fed in ascending rank order, the same bits on
    every rank, run and size (and on the host datapath and the GPU). NONDETERMINISTIC (default):
    the order may vary."""

    NONDETERMINISTIC = 0
    DETERMINISTIC = 1


def _op(op):
    if isinstance(op, ReduceOp):
        return int(op)
    if isinstance(op, str):
        try:
            return int(ReduceOp[op.upper()])
        except KeyError:
            pass
    elif isinstance(op, int) and not isinstance(op, bool) and 0 <= op < len(ReduceOp):
        return op
    else:  # torch.distributed.ReduceOp.SUM and the like
        name = getattr(op, "name", None) or str(op).rsplit(".", 1)[-1]
        if name in ReduceOp.__members__:
            return int(ReduceOp[name])
    raise TypeError("op %r is not a purlin.ReduceOp (SUM PROD MIN MAX AVG)" % (op,))


def _mode(mode):
    if isinstance(mode, ReductionMode):
        return int(mode)
    if isinstance(mode, str) and mode.upper() in ReductionMode.__members__:
        return int(ReductionMode[mode.upper()])
    if isinstance(mode, int) and not isinstance(mode, bool) and mode in (0, 1):
        return mode
    raise TypeError("mode %r is not a purlin.ReductionMode (DETERMINISTIC, NONDETERMINISTIC)"
                    % (mode,))


def _parse_device(device):
    """(datapath, device index or None) from None, 'cpu', 'cuda', 'cuda:1', 1, torch.device."""
    if device is None:
        return _C.DATAPATH_AUTO, None
    if isinstance(device, int) and not isinstance(device, bool):
        if device < 0:
            raise ValueError("device %d is negative" % device)
        return _C.DATAPATH_CUDA, device
    s = str(device)
    if s == "cpu":
        return _C.DATAPATH_HOST, None
    if s == "cuda":
        return _C.DATAPATH_CUDA, getattr(device, "index", None)
    if s.startswith("cuda:") and s[5:].isdigit():
        return _C.DATAPATH_CUDA, int(s[5:])
    raise ValueError("device %r: purlin runs on 'cpu' (host datapath) or 'cuda[:N]'" % (device,))


_LOCAL_RANK_VARS = ("PURLIN_LOCAL_RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                    "MPI_LOCALRANKID", "SLURM_LOCALID")


def _env_local_rank():
    for k in _LOCAL_RANK_VARS:
        v = os.environ.get(k)
        if v is not None and v.strip().isdigit():
            return int(v)
    return 0


def get_unique_id():
    """A rendezvous id (bytes) for init(rank, world_size, unique_id=...). The calling process hosts
    the rendezvous until every rank has joined: it must stay alive until then."""
    return _C.get_unique_id()


# V counts (splits) given as CUDA tensors (int64, contiguous, on the communicator's device) are
# passed to the C library as device pointers with opts.counts_on_device: the kernel reads them at
# its start, nothing is copied to the host (no synchronisation), so such calls can be captured in
# a CUDA graph and the counts changed in place between replays. False: copy them to the host first
# (the old behaviour, kept for comparison).
DEVICE_COUNTS = True


class _DeviceCounts:
    __slots__ = ("ptr", "keep")

    def __init__(self, ptr, keep):
        self.ptr, self.keep = ptr, keep


class Communicator:
    """A purlin communicator. purlin.init() makes the default one; the module-level functions
    (purlin.all_reduce, ...) use it. Methods have the same signatures as those functions."""

    def __init__(self, rank=None, world_size=None, device=None, unique_id=None, group=None,
                 timeout_ms=None, staging_bytes=None, name=None):
        datapath, index = _parse_device(device)
        cfg = dict(datapath=datapath, timeout_ms=int(timeout_ms or 0),
                   staging_bytes=int(staging_bytes or 0), name=name)
        if group is None and (rank is None) != (world_size is None):
            raise ValueError("init: give both rank and world_size (or neither)")
        explicit = rank is not None or group is not None
        if explicit:
            rank, world_size, unique_id = self._explicit(rank, world_size, unique_id, group)
            local = rank
        else:
            if unique_id is not None:
                raise ValueError("init: unique_id= needs rank= and world_size=")
            local = _env_local_rank()
        cfg["device"] = -1 if index is None else index  # -1: the C library's local_rank % count
        if explicit:
            self._c = _C.comm_init_rank(world_size, unique_id, rank, **cfg)
        else:
            self._c = _C.comm_init_env(**cfg)
        self._rank, self._world = self._c.rank, self._c.size
        self._cuda = self._c.datapath == _C.DATAPATH_CUDA
        if self._cuda and index is None:
            index = self._default_device(local)
        self.device_index = index if self._cuda else None
        self._allocs = {}  # address -> (nbytes, weakref or None)
        self._regs = {}  # address -> (nbytes, the registered tensor: kept alive until deregister)

    @staticmethod
    def _explicit(rank, world_size, unique_id, group):
        if group is not None or unique_id is None:
            dist = _torch_dist()
            if dist is None or not dist.is_initialized():
                raise ValueError(
                    "init(rank=, world_size=) needs unique_id=: make it with "
                    "purlin.get_unique_id() on one rank and pass the bytes to every rank (e.g. "
                    "with torch.distributed.broadcast_object_list), or initialise "
                    "torch.distributed first and purlin broadcasts it itself")
            grank, gworld = dist.get_rank(group), dist.get_world_size(group)
            if rank is not None and (rank, world_size) != (grank, gworld):
                raise ValueError("init: rank %s / world_size %s differ from the process group's "
                                 "%d / %d" % (rank, world_size, grank, gworld))
            rank, world_size = grank, gworld
            if unique_id is None:
                box = [get_unique_id() if rank == 0 else None]
                src = dist.get_global_rank(group, 0) if group is not None else 0
                dist.broadcast_object_list(box, src=src, group=group)
                unique_id = box[0]
        rank, world_size = operator.index(rank), operator.index(world_size)
        if not 0 <= rank < world_size:
            raise ValueError("init: rank %d is outside [0, world_size %d)" % (rank, world_size))
        if not isinstance(unique_id, (bytes, bytearray, memoryview)):
            raise TypeError("unique_id must be the bytes from purlin.get_unique_id(), not %s"
                            % type(unique_id).__name__)
        return rank, world_size, bytes(unique_id)

    @staticmethod
    def _default_device(local_rank):
        """local_rank modulo the visible devices, as the C library picks it (needs torch)."""
        torch = A.torch_module()
        if torch is None:
            try:
                import torch
            except ImportError:
                return None
        try:
            n = torch.cuda.device_count()
        except Exception:
            n = 0
        return local_rank % n if n else None

    # ---- properties ---------------------------------------------------------------------------
    def rank(self):
        return self._rank

    def world_size(self):
        return self._world

    @property
    def datapath(self):
        """'host' or 'cuda'."""
        return "cuda" if self._cuda else "host"

    @property
    def device(self):
        """'cpu' on the host datapath, 'cuda:N' on the GPU datapath."""
        if not self._cuda:
            return "cpu"
        return "cuda" if self.device_index is None else "cuda:%d" % self.device_index

    def last_error(self):
        return self._c.last_error()

    def get_async_error(self):
        """The first asynchronous error (a status name such as 'PURLIN_ERR_TIMEOUT'), or None."""
        return self._c.async_error()

    def abort(self):
        self._c.abort()

    def finalize(self):
        """Destroy the communicator (local, waits for no peer). Memory from empty() is released."""
        alive = sum(1 for _, ref in self._allocs.values() if ref is not None and ref() is not None)
        self._allocs.clear()
        self._c.destroy()  # also closes the registrations' peer mappings
        self._regs.clear()
        if alive:
            warnings.warn("purlin.finalize: %d array(s) from purlin.empty() are still referenced; "
                          "their memory is released now and must not be used" % alive,
                          RuntimeWarning, stacklevel=3)

    # ---- checks -------------------------------------------------------------------------------
    def _stream(self, x, stream):
        if not self._cuda:
            if stream not in (None, 0):
                raise ValueError("stream must be None on the host datapath (calls are "
                                 "synchronous); got %r" % (stream,))
            return None
        if stream is not None:
            for attr in ("cuda_stream", "ptr", "handle"):
                if hasattr(stream, attr):
                    return int(getattr(stream, attr))
            return operator.index(stream)
        torch = A.torch_module()
        if torch is not None:
            dev = x.device if A.is_torch(x) and x.device.type == "cuda" else self.device_index
            return torch.cuda.current_stream(dev).cuda_stream
        cupy = sys.modules.get("cupy")
        if cupy is not None:
            return cupy.cuda.get_current_stream().ptr
        return 0

    def _check_device(self, v, name):
        if not self._cuda:
            if not v.is_host:
                raise ValueError("%s is on %s, but this communicator runs the host datapath "
                                 "(processes, host memory): pass CPU arrays" % (name, v.where()))
            return
        if not v.is_cuda:
            raise ValueError("%s is on %s, but this communicator runs on %s: move it there "
                             "(x.to('%s'))" % (name, v.where(), self.device, self.device))
        if v.dev_id >= 0 and self.device_index is not None and v.dev_id != self.device_index:
            raise ValueError("%s is on cuda:%d, but this rank's communicator runs on %s (set "
                             "torch.cuda.set_device(%d) or pass device= to purlin.init)"
                             % (name, v.dev_id, self.device, self.device_index))

    def _input(self, x, stream, name="x"):
        v = A.view(x, name, stream)
        self._check_device(v, name)
        return v

    def _output(self, x, out, count, shape, stream):
        """out as a View: allocated like x when None; checked against x otherwise."""
        if out is None:
            out = A.alloc_like(x, shape, self.device_index)
        elif out is x.obj:
            return x
        o = A.view(out, "out", stream)
        self._check_device(o, "out")
        if o.dtype != x.dtype:
            raise TypeError("out has dtype %s but x has %s: they must match"
                            % (o.dtype_name(), x.dtype_name()))
        if o.count != count:
            raise ValueError("out has %d elements; this call writes %d (shape %s)"
                             % (o.count, count, tuple(shape)))
        if o.readonly:
            raise ValueError("out is read-only")
        return o

    def _writable(self, v, name="x"):
        if v.readonly:
            raise ValueError("%s is read-only, and out=%s asks to write into it" % (name, name))

    def _split(self, x, name):
        """x.count = world_size * n: n, or a ValueError."""
        if x.count % self._world:
            raise ValueError("%s has %d elements, not a multiple of world_size %d"
                             % (name, x.count, self._world))
        return x.count // self._world

    def _counts(self, c, name, stream):
        """A list of ints (one per rank, >= 0), or _DeviceCounts for counts in device memory."""
        if not isinstance(c, (list, tuple)) and not A.is_numpy(c) and (
                A.is_torch(c) or hasattr(c, "__cuda_array_interface__") or hasattr(c, "__dlpack__")):
            v = A.view(c, name, stream)
            if v.is_cuda and not v.is_host and DEVICE_COUNTS:
                self._check_device(v, name)
                if v.dtype not in (_C.DT_I64, _C.DT_U64):
                    raise TypeError("%s in device memory must be int64 (read as size_t); got %s"
                                    % (name, v.dtype_name()))
                if v.count != self._world:
                    raise ValueError("%s has %d entries; it needs one per rank (%d)"
                                     % (name, v.count, self._world))
                return _DeviceCounts(v.ptr, v.keep)
        if hasattr(c, "tolist"):
            c = c.tolist()
        try:
            lst = [operator.index(i) for i in c]
        except TypeError:
            raise TypeError("%s must be integers, one per rank (a list, a numpy array or a "
                            "tensor); got %r" % (name, c)) from None
        if len(lst) != self._world:
            raise ValueError("%s has %d entries; it needs one per rank (world_size %d)"
                             % (name, len(lst), self._world))
        for i, n in enumerate(lst):
            if n < 0:
                raise ValueError("%s[%d] = %d is negative" % (name, i, n))
        return lst

    @staticmethod
    def _row(v):
        """Elements per row along dim 0 (V variants count rows, as PyTorch's split sizes)."""
        return A.prod(v.shape[1:]) if len(v.shape) > 1 else 1

    @staticmethod
    def _need_flat(v, name, what):
        if len(v.shape) > 1:
            raise ValueError("%s has shape %s: with %s in device memory (read by the GPU as "
                             "element counts) x and out must be 1-D (use x.view(-1))"
                             % (name, v.shape, what))

    # ---- collectives --------------------------------------------------------------------------
    def all_reduce(self, x, op=ReduceOp.SUM, out=None, mode=ReductionMode.NONDETERMINISTIC,
                   stream=None):
        """out[i] = op over ranks of x[i]. out=None: a new array like x; out=x: in place."""
        op, mode = _op(op), _mode(mode)
        s = self._stream(x, stream)
        v = self._input(x, s)
        if out is x:
            self._writable(v)
        o = self._output(v, out, v.count, v.shape, s)
        self._c.all_reduce(v.ptr, o.ptr, v.count, v.dtype, op, mode, s)
        return o.obj

    def all_gather(self, x, out=None, stream=None):
        """out = the concatenation of every rank's x, in rank order (dim 0). out=x: in place, x
        holds the whole output and this rank's part is already at its slice."""
        s = self._stream(x, stream)
        v = self._input(x, s)
        W, r = self._world, self._rank
        if out is x:
            self._writable(v)
            n = self._split(v, "x (in place: the whole output)")
            self._c.all_gather(v.ptr + r * n * v.esize, v.ptr, n, v.dtype, s)
            return x
        shape = (W * v.shape[0],) + tuple(v.shape[1:]) if v.shape else (W,)
        o = self._output(v, out, W * v.count, shape, s)
        self._c.all_gather(v.ptr, o.ptr, v.count, v.dtype, s)
        return o.obj

    def reduce_scatter(self, x, op=ReduceOp.SUM, out=None, mode=ReductionMode.NONDETERMINISTIC,
                       stream=None):
        """out = op over ranks of this rank's 1/world_size slice of x. out=x: in place, the result
        lands in x's own slice (returned as a view for numpy/torch)."""
        op, mode = _op(op), _mode(mode)
        s = self._stream(x, stream)
        v = self._input(x, s)
        W, r = self._world, self._rank
        n = self._split(v, "x")
        if out is x:
            self._writable(v)
            self._c.reduce_scatter(v.ptr, v.ptr + r * n * v.esize, n, v.dtype, op, mode, s)
            return A.flat_slice(x, r * n, (r + 1) * n)
        if v.shape and v.shape[0] % W == 0:
            shape = (v.shape[0] // W,) + tuple(v.shape[1:])
        else:
            shape = (n,)
        o = self._output(v, out, n, shape, s)
        self._c.reduce_scatter(v.ptr, o.ptr, n, v.dtype, op, mode, s)
        return o.obj

    def all_to_all(self, x, out=None, stream=None):
        """Block p of x (1/world_size of it) goes to rank p; out's block p comes from rank p."""
        s = self._stream(x, stream)
        v = self._input(x, s)
        n = self._split(v, "x")
        if out is x:
            self._writable(v)
        o = self._output(v, out, v.count, v.shape, s)
        self._c.all_to_all(v.ptr, o.ptr, n, v.dtype, s)
        return o.obj

    def all_gather_v(self, x, counts, out=None, stream=None):
        """Rank r contributes counts[r] rows (dim 0); out is their concatenation in rank order.
        out=x: in place, x holds the whole output with this rank's rows already in place."""
        s = self._stream(x, stream)
        v = self._input(x, s)
        c = self._counts(counts, "counts", s)
        r = self._rank
        if isinstance(c, _DeviceCounts):
            self._need_flat(v, "x", "counts")
            if out is None or out is x:
                raise ValueError("all_gather_v with counts in device memory needs out= (a "
                                 "separate buffer: its size is not known on the host)")
            o = A.view(out, "out", s)
            self._check_device(o, "out")
            self._need_flat(o, "out", "counts")
            if o.dtype != v.dtype:
                raise TypeError("out has dtype %s but x has %s" % (o.dtype_name(), v.dtype_name()))
            self._c.all_gather_v(v.ptr, v.count, o.ptr, c.ptr, v.dtype, s, True)
            return out
        row = self._row(v)
        elems = [k * row for k in c]
        total = sum(elems)
        if out is x:
            self._writable(v)
            if v.count != total:
                raise ValueError("in place all_gather_v: x is the whole output and must hold "
                                 "sum(counts) = %d rows (%d elements); it has %d elements"
                                 % (sum(c), total, v.count))
            off = sum(elems[:r])
            self._c.all_gather_v(v.ptr + off * v.esize, elems[r], v.ptr, elems, v.dtype, s, False)
            return x
        if v.count != elems[r]:
            raise ValueError("x has %d elements, but counts[%d] = %d rows of %d elements = %d"
                             % (v.count, r, c[r], row, elems[r]))
        shape = (sum(c),) + tuple(v.shape[1:])
        o = self._output(v, out, total, shape, s)
        self._c.all_gather_v(v.ptr, v.count, o.ptr, elems, v.dtype, s, False)
        return o.obj

    def reduce_scatter_v(self, x, counts, op=ReduceOp.SUM, out=None,
                         mode=ReductionMode.NONDETERMINISTIC, stream=None):
        """x has sum(counts) rows on every rank; rank r receives the reduction of rows
        [sum(counts[:r]), sum(counts[:r+1])). out=x: in place, into x's own rows."""
        op, mode = _op(op), _mode(mode)
        s = self._stream(x, stream)
        v = self._input(x, s)
        c = self._counts(counts, "counts", s)
        r = self._rank
        if isinstance(c, _DeviceCounts):
            self._need_flat(v, "x", "counts")
            if out is None or out is x:
                raise ValueError("reduce_scatter_v with counts in device memory needs out= (a "
                                 "separate buffer: its size is not known on the host)")
            o = A.view(out, "out", s)
            self._check_device(o, "out")
            if o.dtype != v.dtype:
                raise TypeError("out has dtype %s but x has %s" % (o.dtype_name(), v.dtype_name()))
            self._c.reduce_scatter_v(v.ptr, o.ptr, c.ptr, v.dtype, op, mode, s, True)
            return out
        row = self._row(v)
        elems = [k * row for k in c]
        if v.count != sum(elems):
            raise ValueError("x has %d elements, but sum(counts) = %d rows of %d elements = %d"
                             % (v.count, sum(c), row, sum(elems)))
        if out is x:
            self._writable(v)
            off = sum(elems[:r])
            self._c.reduce_scatter_v(v.ptr, v.ptr + off * v.esize, elems, v.dtype, op, mode, s,
                                     False)
            return A.flat_slice(x, off, off + elems[r])
        shape = (c[r],) + tuple(v.shape[1:])
        o = self._output(v, out, elems[r], shape, s)
        self._c.reduce_scatter_v(v.ptr, o.ptr, elems, v.dtype, op, mode, s, False)
        return o.obj

    def all_to_all_v(self, x, send_counts, recv_counts=None, out=None, stream=None):
        """Rows [sum(send_counts[:p]), +send_counts[p]) of x go to rank p; out holds, in rank
        order, recv_counts[p] rows from each rank p. recv_counts=None: exchanged first (one
        extra all_to_all; not capturable). out=x: in place (needs send_counts == recv_counts)."""
        s = self._stream(x, stream)
        v = self._input(x, s)
        sc = self._counts(send_counts, "send_counts", s)
        if recv_counts is None:
            if isinstance(sc, _DeviceCounts):
                raise ValueError("all_to_all_v: send_counts in device memory need recv_counts "
                                 "in device memory too")
            rc = self._exchange_counts(sc)
        else:
            rc = self._counts(recv_counts, "recv_counts", s)
        dev = isinstance(sc, _DeviceCounts)
        if dev != isinstance(rc, _DeviceCounts):
            raise ValueError("all_to_all_v: send_counts and recv_counts must both be in device "
                             "memory or both on the host")
        if dev:
            self._need_flat(v, "x", "counts")
            if out is None:
                raise ValueError("all_to_all_v with counts in device memory needs out= (its size "
                                 "is not known on the host)")
            o = v if out is x else A.view(out, "out", s)
            self._check_device(o, "out")
            if o.dtype != v.dtype:
                raise TypeError("out has dtype %s but x has %s" % (o.dtype_name(), v.dtype_name()))
            self._c.all_to_all_v(v.ptr, sc.ptr, o.ptr, rc.ptr, v.dtype, s, True)
            return out
        row = self._row(v)
        se, re_ = [k * row for k in sc], [k * row for k in rc]
        if v.count != sum(se):
            raise ValueError("x has %d elements, but sum(send_counts) = %d rows of %d elements = "
                             "%d" % (v.count, sum(sc), row, sum(se)))
        if out is x:
            self._writable(v)
            if list(sc) != list(rc):
                raise ValueError("all_to_all_v in place (out=x) needs send_counts == recv_counts; "
                                 "got %s and %s" % (sc, rc))
        shape = (sum(rc),) + tuple(v.shape[1:])
        o = self._output(v, out, sum(re_), shape, s)
        self._c.all_to_all_v(v.ptr, se, o.ptr, re_, v.dtype, s, False)
        return o.obj

    def _exchange_counts(self, sc):
        import array

        send = array.array("q", sc)
        recv = array.array("q", [0] * self._world)
        if self._cuda:
            import torch

            t = torch.tensor(sc, dtype=torch.int64, device=self.device)
            return self.all_to_all(t).tolist()
        self._c.all_to_all(A.view(send, "send_counts").ptr, A.view(recv, "recv").ptr, 1,
                           _C.DT_I64, None)
        return list(recv)

    # ---- memory -------------------------------------------------------------------------------
    def empty(self, shape, dtype=None, device=None):
        """An uninitialised array in peer-accessible memory (purlin_mem_alloc): collectives on it
        skip staging. Collective: every rank calls it, in the same order, with the same size.
        Host datapath: a numpy array (a torch CPU tensor when dtype is a torch dtype); GPU
        datapath: a torch CUDA tensor. It lives until free(x) or finalize()."""
        if isinstance(shape, int):
            shape = (shape,)
        shape = tuple(operator.index(s) for s in shape)
        if any(s < 0 for s in shape):
            raise ValueError("shape %s has a negative extent" % (shape,))
        if dtype is None:
            dtype = "float32"
        code = A.dtype_code(dtype)
        torch = A.torch_module()
        as_torch = self._cuda or (torch is not None and isinstance(dtype, torch.dtype))
        if device is not None:
            dp, idx = _parse_device(device)
            want = _C.DATAPATH_CUDA if self._cuda else _C.DATAPATH_HOST
            if dp != want or (idx is not None and self._cuda and idx != self.device_index):
                raise ValueError("empty: device %r, but this communicator's memory is on %s"
                                 % (device, self.device))
        nbytes = A.prod(shape) * A.DTYPE_SIZES[code]
        if nbytes == 0:  # nothing to share: an ordinary empty array
            if as_torch:
                import torch

                return torch.empty(shape, dtype=A.torch_dtype(code),
                                   device=self.device if self._cuda else "cpu")
            import numpy as np

            return np.empty(shape, dtype=A.numpy_dtype(code))
        ptr = self._c.mem_alloc(nbytes)
        try:
            if self._cuda:
                import torch
                from torch.utils import dlpack

                dev_id = self.device_index if self.device_index is not None else 0
                cap = _C.dlpack_capsule(ptr, nbytes, A.DEV_CUDA, dev_id)
                arr = dlpack.from_dlpack(cap).view(A.torch_dtype(code)).view(shape)
            elif as_torch:
                import torch

                buf = _C.host_buffer(ptr, nbytes)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    arr = torch.frombuffer(buf, dtype=torch.uint8)
                arr = arr.view(A.torch_dtype(code)).view(shape)
            else:
                import numpy as np

                buf = _C.host_buffer(ptr, nbytes)
                arr = np.frombuffer(buf, dtype=np.uint8).view(A.numpy_dtype(code)).reshape(shape)
        except BaseException:
            self._c.mem_free(ptr)
            raise
        try:
            ref = weakref.ref(arr)
        except TypeError:
            ref = None
        self._allocs[ptr] = (nbytes, ref)
        return arr

    def free(self, x):
        """Release an array from empty(). Collective (every rank, same order); x must not be used
        afterwards."""
        ptr = A.view(x, "x").ptr
        if ptr not in self._allocs:
            raise ValueError("free: x is not an array returned by purlin.empty() (or was freed)")
        del self._allocs[ptr]
        self._c.mem_free(ptr)

    def register(self, x):
        """Make an existing CUDA tensor peer-accessible (purlin_mem_register): collectives whose
        buffers lie inside it skip staging (zero copy), as on memory from empty(). For PyTorch's
        caching allocator (not its expandable segments) and other cudaMalloc memory. Collective:
        every rank calls it, in the same order, with a tensor of the same size. Blocking, not
        capturable: register once (a model's activation or bucket buffers), reuse many times, and
        deregister(x) on every rank before the tensor's memory can be freed (a peer may read it
        until then); x is kept referenced meanwhile. CUDA datapath only."""
        if not self._cuda:
            raise RuntimeError("register: needs the CUDA datapath (on the host datapath, "
                               "peer-accessible memory comes from purlin.empty())")
        try:
            v = A.view(x, "x")
            if not v.is_cuda:
                raise ValueError("register: x is %s memory, not a CUDA tensor" % v.where())
            nbytes = v.count * v.esize
            if nbytes == 0:
                raise ValueError("register: x is empty")
        except (TypeError, ValueError):
            # refused here: the library still takes part in the exchange (a NULL pointer), so
            # that every rank fails, naming this one, instead of waiting for it
            try:
                self._c.mem_register(0, 0)
            except _C.PurlinError:
                pass
            raise
        self._c.mem_register(v.ptr, nbytes)
        self._regs[v.ptr] = (nbytes, x)

    def deregister(self, x):
        """Undo register(x). Collective (every rank, same order); waits for this rank's GPU work,
        closes its mappings of the peers' memory and waits for every rank, so that no peer still
        reads or maps x when it returns."""
        ptr = A.view(x, "x").ptr
        if ptr not in self._regs:
            # the library refuses it too, on every rank (naming this one)
            try:
                self._c.mem_deregister(ptr)
            except _C.PurlinError:
                pass
            raise ValueError("deregister: x is not a tensor passed to register() (or was "
                             "deregistered)")
        self._c.mem_deregister(ptr)  # on failure the registration (and x's reference) stays
        del self._regs[ptr]


def _torch_dist():
    torch = A.torch_module()
    if torch is None:
        return None
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    return dist if dist.is_available() else None
