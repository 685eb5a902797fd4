"""What PyTorch computes while a candidate's forward runs: the aten ops it may run (allocation, views,
copies, fills: ``ALLOWED_OPS``) and the trace that counts the others (``OpTrace``)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from torch.utils._python_dispatch import TorchDispatchMode

if TYPE_CHECKING:
    from torch._ops import OpOverload

# aten ops a candidate's forward may run: allocation, views, copies and fills. Anything else is
# PyTorch doing the computation the kernel should do.
ALLOWED_OPS = frozenset(
    """empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like
    new_ones full full_like new_full zero_ fill_ view _unsafe_view reshape _reshape_alias as_strided t
    transpose permute expand expand_as squeeze unsqueeze flatten unflatten select slice narrow split
    split_with_sizes chunk unbind detach alias clone contiguous copy_ _to_copy to lift_fresh
    lift_fresh_copy view_as resize_ diagonal unfold movedim _local_scalar_dense item sym_size sym_stride
    sym_numel sym_storage_offset is_contiguous set_ _has_compatible_shallow_copy_type""".split()
)


# torch's TorchDispatchMode has no annotations (its __init_subclass__ and __init__ are untyped calls)
class OpTrace(TorchDispatchMode):  # type: ignore[no-untyped-call]
    """Counts the aten ops run while active."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func: OpOverload, types: tuple[type, ...], args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    def forbidden(self) -> dict[str, int]:
        return {name: n for name, n in self.ops.items() if name not in ALLOWED_OPS}

    def start(self) -> OpTrace:
        """Enter the trace outside a ``with`` (a side arms it before the harness's clock starts)."""
        self.__enter__()  # type: ignore[no-untyped-call]
        return self

    def stop(self) -> None:
        self.__exit__(None, None, None)  # type: ignore[no-untyped-call]
