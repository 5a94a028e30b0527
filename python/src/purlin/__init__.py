"""purlin: collectives inside one NVLink server, and across processes of one machine.

    import purlin
    purlin.init()                       # from purlinrun / torchrun / mpirun / Slurm variables
    y = purlin.all_reduce(x)            # x: a torch tensor (CUDA or CPU), a numpy array, or any
                                        #    object with __dlpack__ / __cuda_array_interface__
    purlin.all_reduce(x, out=x)         # in place
    purlin.finalize()

Collectives: all_reduce, all_gather, reduce_scatter, all_to_all and the V variants all_gather_v,
reduce_scatter_v, all_to_all_v (counts are rows along dim 0, as PyTorch's split sizes: a list, a
numpy array or a tensor; a CUDA int64 tensor keeps the call capturable). Every collective returns
its output: a new array like x when out is None, else out.

Datapaths: on a machine with GPUs, CUDA tensors, launched on torch.cuda.current_stream() (or
stream=); without one (or with device='cpu'), the host datapath: ranks are processes, arrays live
in host memory (numpy, torch CPU), calls are synchronous.

Errors: a wrong dtype is a TypeError; a non-contiguous array, a wrong device or a size that does not
fit is a ValueError -- both before anything is launched. Errors of the C library (ranks that
disagree: PURLIN_ERR_MISMATCH; a dead or silent peer: TIMEOUT / REMOTE) are PurlinError, with
.status, .code and .text (the communicator's last-error text).
"""

import atexit as _atexit
import sys as _sys

from . import _C
from . import _torch as _torch_ops
from ._arrays import is_torch as _is_torch
from ._core import Communicator, ReduceOp, ReductionMode, get_unique_id

PurlinError = _C.PurlinError

__version__ = "%d.%d.%d" % (_C.VERSION // 10000, _C.VERSION // 100 % 100, _C.VERSION % 100)

__all__ = [
    "init", "finalize", "is_initialized", "rank", "world_size", "device", "datapath",
    "get_unique_id", "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "all_gather_v",
    "reduce_scatter_v", "all_to_all_v", "empty", "free", "register", "deregister",
    "get_async_error", "abort",
    "ReduceOp", "ReductionMode", "PurlinError", "Communicator",
]

_comm = None


def _default_comm():
    if _comm is None:
        raise RuntimeError("purlin is not initialised: call purlin.init() first")
    return _comm


def init(rank=None, world_size=None, device=None, unique_id=None, group=None, timeout_ms=None,
         staging_bytes=None, name=None):
    """Create the default communicator; returns it.

    - init(): from the launcher's variables (purlinrun, torchrun, mpirun, Slurm).
    - init(rank, world_size, unique_id=id): explicit; id is purlin.get_unique_id() made on one
      rank and passed to all (e.g. torch.distributed.broadcast_object_list).
    - init(rank, world_size) or init(group=pg) with torch.distributed initialised: purlin makes the
      id on the group's rank 0 and broadcasts it over the group.
    device: None (the GPU datapath when a GPU is usable, on local_rank % device_count; else the
    host datapath), 'cpu' (host datapath), 'cuda', 'cuda:N', N or a torch.device.
    timeout_ms: deadline of every wait (default PURLIN_TIMEOUT_MS); staging_bytes: staging memory
    per rank (default PURLIN_STAGING_BYTES); name: label in logs and errors.
    """
    global _comm
    if _comm is not None:
        raise RuntimeError("purlin is already initialised: call purlin.finalize() first")
    c = Communicator(rank=rank, world_size=world_size, device=device, unique_id=unique_id,
                     group=group, timeout_ms=timeout_ms, staging_bytes=staging_bytes, name=name)
    _comm = c
    if "torch" in _sys.modules:  # never import torch for a program that does not use it
        try:
            _torch_ops.register()
        except Exception:  # torch present but unusable: the direct path still works
            pass
    return c


def finalize():
    """Destroy the default communicator (local: waits for no peer). Arrays from purlin.empty() are
    released with it."""
    global _comm
    c, _comm = _comm, None
    if c is not None:
        c.finalize()


def is_initialized():
    return _comm is not None


@_atexit.register
def _finalize_at_exit():
    global _comm
    c, _comm = _comm, None
    if c is not None:
        c._allocs.clear()
        c._c.destroy()


def rank():
    """Rank of this process in the default communicator."""
    return _default_comm().rank()


def world_size():
    """Number of ranks of the default communicator."""
    return _default_comm().world_size()


def device():
    """'cpu' (host datapath) or 'cuda:N'."""
    return _default_comm().device


def datapath():
    """'host' or 'cuda'."""
    return _default_comm().datapath


def get_async_error():
    """The first asynchronous error of the default communicator (e.g. 'PURLIN_ERR_TIMEOUT' from
    a GPU call that has finished), or None."""
    return _default_comm().get_async_error()


def abort():
    """Make every rank's waits on the default communicator return PURLIN_ERR_REMOTE."""
    _default_comm().abort()


def _traced(x):
    return _is_torch(x) and _torch_ops.compiling() and _torch_ops.register()


def all_reduce(x, op=ReduceOp.SUM, out=None, mode=ReductionMode.NONDETERMINISTIC, stream=None):
    """out[i] = op over ranks of x[i]; returns out (a new array like x when None; x when out=x)."""
    if stream is None and _traced(x):
        import torch

        o, m = int(op), int(mode)
        if out is None:
            return torch.ops.purlin.all_reduce(x, o, m)
        if out is x:
            torch.ops.purlin.all_reduce_(x, o, m)
            return x
    return _default_comm().all_reduce(x, op=op, out=out, mode=mode, stream=stream)


def all_gather(x, out=None, stream=None):
    """Every rank's x concatenated in rank order along dim 0 (world_size * x.numel() elements)."""
    if out is None and stream is None and _traced(x):
        import torch

        return torch.ops.purlin.all_gather(x)
    return _default_comm().all_gather(x, out=out, stream=stream)


def reduce_scatter(x, op=ReduceOp.SUM, out=None, mode=ReductionMode.NONDETERMINISTIC,
                   stream=None):
    """This rank's 1/world_size block of op over ranks of x."""
    if out is None and stream is None and _traced(x):
        import torch

        return torch.ops.purlin.reduce_scatter(x, int(op), int(mode))
    return _default_comm().reduce_scatter(x, op=op, out=out, mode=mode, stream=stream)


def all_to_all(x, out=None, stream=None):
    """Block p of x goes to rank p; block p of out comes from rank p."""
    if out is None and stream is None and _traced(x):
        import torch

        return torch.ops.purlin.all_to_all(x)
    return _default_comm().all_to_all(x, out=out, stream=stream)


def all_gather_v(x, counts, out=None, stream=None):
    """Rank r contributes counts[r] rows of x; out has sum(counts) rows, in rank order."""
    return _default_comm().all_gather_v(x, counts, out=out, stream=stream)


def reduce_scatter_v(x, counts, op=ReduceOp.SUM, out=None, mode=ReductionMode.NONDETERMINISTIC,
                     stream=None):
    """x has sum(counts) rows; rank r gets the reduction of its counts[r] rows."""
    return _default_comm().reduce_scatter_v(x, counts, op=op, out=out, mode=mode, stream=stream)


def all_to_all_v(x, send_counts, recv_counts=None, out=None, stream=None):
    """send_counts[p] rows of x go to rank p; out gets recv_counts[p] rows from each rank p."""
    return _default_comm().all_to_all_v(x, send_counts, recv_counts, out=out, stream=stream)


def empty(shape, dtype=None, device=None):
    """An uninitialised array in peer-accessible memory (zero-copy collectives). Collective."""
    return _default_comm().empty(shape, dtype=dtype, device=device)


def free(x):
    """Release an array from purlin.empty(). Collective."""
    _default_comm().free(x)


def register(x):
    """Make an existing CUDA tensor peer-accessible (zero-copy collectives on it). Collective."""
    _default_comm().register(x)


def deregister(x):
    """Undo purlin.register(x), before x's memory may be freed. Collective."""
    _default_comm().deregister(x)
