"""Array-likes as the C library sees them: address, purlin dtype, element count, device.

torch tensors are read through their own attributes (no DLPack round trip: cheaper, and safe under
CUDA graph capture and torch.compile); everything else goes through purlin._C.inspect, which speaks
__array_interface__ (numpy, ml_dtypes), DLPack, __cuda_array_interface__ and the buffer protocol.
Neither numpy nor torch is imported here unless the caller already uses it.
"""

import math
import sys

from . import _C

# purlin dtype codes, by name (numpy's dtype.name / torch's dtype without "torch.").
DTYPES = {
    "float32": _C.DT_F32,
    "float16": _C.DT_F16,
    "bfloat16": _C.DT_BF16,
    "float64": _C.DT_F64,
    "int8": _C.DT_I8,
    "uint8": _C.DT_U8,
    "int32": _C.DT_I32,
    "uint32": _C.DT_U32,
    "int64": _C.DT_I64,
    "uint64": _C.DT_U64,
    "float8_e4m3fn": _C.DT_FP8_E4M3,
    "float8_e5m2": _C.DT_FP8_E5M2,
}
DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
DTYPE_SIZES = {
    _C.DT_F32: 4, _C.DT_F16: 2, _C.DT_BF16: 2, _C.DT_F64: 8, _C.DT_I8: 1, _C.DT_U8: 1,
    _C.DT_I32: 4, _C.DT_U32: 4, _C.DT_I64: 8, _C.DT_U64: 8, _C.DT_FP8_E4M3: 1, _C.DT_FP8_E5M2: 1,
}
SUPPORTED = " ".join(DTYPES)

# DLPack device types
DEV_CPU, DEV_CUDA, DEV_CUDA_HOST, DEV_CUDA_MANAGED = 1, 2, 3, 13


class View:
    """One array argument of a call: what the C library needs, and what keeps the memory alive."""

    __slots__ = ("obj", "ptr", "dtype", "count", "shape", "kind", "dev_type", "dev_id",
                 "readonly", "keep")

    def __init__(self, obj, ptr, dtype, count, shape, kind, dev_type, dev_id, readonly, keep):
        self.obj, self.ptr, self.dtype, self.count, self.shape = obj, ptr, dtype, count, shape
        self.kind, self.dev_type, self.dev_id, self.readonly, self.keep = (
            kind, dev_type, dev_id, readonly, keep)

    @property
    def esize(self):
        return DTYPE_SIZES[self.dtype]

    @property
    def is_cuda(self):
        return self.dev_type in (DEV_CUDA, DEV_CUDA_MANAGED)

    @property
    def is_host(self):
        return self.dev_type in (DEV_CPU, DEV_CUDA_HOST, DEV_CUDA_MANAGED)

    def where(self):
        if self.dev_type == DEV_CPU:
            return "cpu"
        if self.is_cuda:
            return "cuda" if self.dev_id < 0 else "cuda:%d" % self.dev_id
        return "device type %d" % self.dev_type

    def dtype_name(self):
        return DTYPE_NAMES[self.dtype]


def torch_module():
    """torch if the program has imported it (we never import it for the user here)."""
    return sys.modules.get("torch")


def is_torch(x):
    torch = torch_module()
    return torch is not None and isinstance(x, torch.Tensor)


def is_numpy(x):
    np = sys.modules.get("numpy")
    return np is not None and isinstance(x, np.ndarray)


def _torch_view(t, name):
    dt = DTYPES.get(str(t.dtype).replace("torch.", ""))
    if dt is None:
        raise TypeError("%s has dtype %s, which purlin does not support (%s)"
                        % (name, t.dtype, SUPPORTED))
    if not t.is_contiguous():
        raise ValueError("%s is not contiguous (shape %s, stride %s): purlin reads and writes "
                         "one dense block in C order; pass %s.contiguous()"
                         % (name, tuple(t.shape), t.stride(), name))
    dev = t.device
    if dev.type == "cpu":
        dev_type, dev_id = DEV_CPU, -1
    elif dev.type == "cuda":
        dev_type, dev_id = DEV_CUDA, dev.index if dev.index is not None else -1
    else:
        raise ValueError("%s is on device %s; purlin takes CPU tensors (host datapath) or CUDA "
                         "tensors (GPU datapath)" % (name, dev))
    return View(t, t.data_ptr(), dt, t.numel(), tuple(t.shape), "torch", dev_type, dev_id,
                False, t)


def view(x, name, stream=None):
    """The View of array-like x; TypeError/ValueError saying what is wrong with it."""
    if is_torch(x):
        return _torch_view(x, name)
    ptr, dt, count, shape, dev_type, dev_id, ro, keep = _C.inspect(x, name, stream)
    kind = "numpy" if is_numpy(x) else "other"
    mod = type(x).__module__.split(".")[0]
    if mod == "cupy":
        kind = "cupy"
    return View(x, ptr, dt, count, shape, kind, dev_type, dev_id, bool(ro), keep)


def numpy_dtype(dt):
    """numpy dtype of purlin dtype code dt (bfloat16 and fp8 need ml_dtypes)."""
    import numpy as np

    name = DTYPE_NAMES[dt]
    if hasattr(np, name):
        return np.dtype(name)
    try:
        import ml_dtypes
    except ImportError:
        raise TypeError("%s arrays need the ml_dtypes package with numpy (pip install ml_dtypes)"
                        % name) from None
    return np.dtype(getattr(ml_dtypes, name))


def torch_dtype(dt):
    import torch

    return getattr(torch, DTYPE_NAMES[dt])


def dtype_code(dtype):
    """purlin dtype code of a numpy/torch/ml_dtypes dtype, a type, or a name."""
    if isinstance(dtype, int) and dtype in DTYPE_NAMES:
        return dtype
    name = dtype if isinstance(dtype, str) else None
    if name is None:
        torch = torch_module()
        if torch is not None and isinstance(dtype, torch.dtype):
            name = str(dtype).replace("torch.", "")
        else:
            name = getattr(dtype, "name", None) or getattr(dtype, "__name__", None)
            if name is None:
                try:
                    import numpy as np

                    name = np.dtype(dtype).name
                except Exception:
                    name = str(dtype)
    code = DTYPES.get(name)
    if code is None:
        raise TypeError("dtype %r is not supported by purlin (%s)" % (dtype, SUPPORTED))
    return code


def prod(shape):
    return math.prod(shape) if shape else 1


def alloc_like(v, shape, device_index=None):
    """A new array of v's kind, dtype and device, of `shape`."""
    shape = tuple(int(s) for s in shape)
    if v.kind == "torch":
        return v.obj.new_empty(shape)
    if v.kind == "numpy":
        import numpy as np

        return np.empty(shape, dtype=v.obj.dtype)
    if v.kind == "cupy" and v.is_cuda:
        import cupy

        with cupy.cuda.Device(v.dev_id if v.dev_id >= 0 else cupy.cuda.Device().id):
            return cupy.empty(shape, dtype=v.obj.dtype)
    if v.is_cuda:
        try:
            import torch
        except ImportError:
            raise TypeError("cannot allocate the output for a %s on %s without torch: pass out="
                            % (type(v.obj).__name__, v.where())) from None
        dev = v.dev_id if v.dev_id >= 0 else device_index
        return torch.empty(shape, dtype=torch_dtype(v.dtype),
                           device="cuda" if dev is None else "cuda:%d" % dev)
    try:
        import numpy as np
    except ImportError:
        raise TypeError("cannot allocate the output for a %s without numpy: pass out="
                        % type(v.obj).__name__) from None
    return np.empty(shape, dtype=numpy_dtype(v.dtype))


def flat_slice(x, start, stop):
    """x.reshape(-1)[start:stop] for numpy/torch/cupy arrays (a view); x itself otherwise."""
    if hasattr(x, "reshape"):
        try:
            return x.reshape(-1)[start:stop]
        except Exception:
            pass
    return x
