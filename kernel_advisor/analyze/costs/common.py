"""Small helpers every family uses to turn tensors read and written into an OpCost."""
from __future__ import annotations

from typing import Iterable

from kernel_advisor.analyze.costs.call import Tensor
from kernel_advisor.analyze.costs.registry import OpCost
from kernel_advisor.analyze.costs.shapes import Shape, Unmodelled

ZERO_COST_DTYPE = "float32"  # compute dtype reported for ops that do no arithmetic at all


def read_bytes(tensors: Iterable[Tensor | None]) -> int:
    """Each tensor read once at its real size: a broadcast operand is not re-read per use."""
    return sum(t.bytes for t in tensors if t is not None)


def written(shape: Shape, dtype: str) -> Tensor:
    """An output the formula derived; a negative size means the recorded arguments are not
    ones ATen would accept."""
    if any(not isinstance(s, int) or s < 0 for s in shape):
        raise Unmodelled(f"derived output shape {tuple(shape)} is invalid")
    return Tensor(tuple(shape), dtype)


def cost(flops: float, bytes_moved: float, compute_dtype: str,
         tensor_cores: bool = False) -> OpCost:
    if flops < 0 or bytes_moved < 0:
        raise Unmodelled(f"negative cost ({flops} flops, {bytes_moved} bytes) from bad arguments")
    return OpCost(float(flops), float(bytes_moved), compute_dtype, tensor_cores)


def io_cost(flops: float, reads: Iterable[Tensor | None], writes: Iterable[Tensor | None],
            compute_dtype: str, tensor_cores: bool = False) -> OpCost:
    """The common case: read every input once, write every output once."""
    return cost(flops, read_bytes(reads) + read_bytes(writes), compute_dtype, tensor_cores)

