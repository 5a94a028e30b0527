"""torch custom ops: purlin's collectives as operators that torch.compile can trace (and CUDA graphs
capture): purlin::all_reduce, all_gather, reduce_scatter, all_to_all (functional: a new output),
and purlin::all_reduce_ (in place). They run on the default communicator (purlin.init()).

purlin.all_reduce(x) goes through them only while torch.compile traces; in eager mode it calls the
library directly (no dispatcher overhead). Graph capture needs nothing special either way: every
call is enqueued on torch.cuda.current_stream(). Registered by purlin.init() when torch is
already imported (import torch before purlin.init(); torch >= 2.4 for torch.library.custom_op),
or by purlin._torch.register().
"""

_registered = False


def compiling():
    from . import _arrays as A

    torch = A.torch_module()
    if torch is None:
        return False
    comp = getattr(torch, "compiler", None)
    if comp is not None and hasattr(comp, "is_compiling"):
        return comp.is_compiling()
    return False


def register():
    """Register the ops once; False when this torch has no torch.library.custom_op."""
    global _registered
    if _registered:
        return True
    import torch

    if not hasattr(torch.library, "custom_op"):
        return False
    import purlin

    def comm():
        return purlin._default_comm()

    @torch.library.custom_op("purlin::all_reduce", mutates_args=())
    def all_reduce(x: torch.Tensor, op: int, mode: int) -> torch.Tensor:
        return comm().all_reduce(x, op=op, mode=mode)

    @all_reduce.register_fake
    def _(x, op, mode):
        return torch.empty_like(x)

    @torch.library.custom_op("purlin::all_reduce_", mutates_args=("x",))
    def all_reduce_(x: torch.Tensor, op: int, mode: int) -> None:
        comm().all_reduce(x, op=op, mode=mode, out=x)

    @all_reduce_.register_fake
    def _(x, op, mode):
        return None

    @torch.library.custom_op("purlin::all_gather", mutates_args=())
    def all_gather(x: torch.Tensor) -> torch.Tensor:
        return comm().all_gather(x)

    @all_gather.register_fake
    def _(x):
        w = comm().world_size()
        shape = (w * x.shape[0],) + tuple(x.shape[1:]) if x.dim() else (w,)
        return x.new_empty(shape)

    @torch.library.custom_op("purlin::reduce_scatter", mutates_args=())
    def reduce_scatter(x: torch.Tensor, op: int, mode: int) -> torch.Tensor:
        return comm().reduce_scatter(x, op=op, mode=mode)

    @reduce_scatter.register_fake
    def _(x, op, mode):
        w = comm().world_size()
        if x.dim() and x.shape[0] % w == 0:
            return x.new_empty((x.shape[0] // w,) + tuple(x.shape[1:]))
        return x.new_empty((x.numel() // w,))

    @torch.library.custom_op("purlin::all_to_all", mutates_args=())
    def all_to_all(x: torch.Tensor) -> torch.Tensor:
        return comm().all_to_all(x)

    @all_to_all.register_fake
    def _(x):
        return torch.empty_like(x)

    _registered = True
    return True
