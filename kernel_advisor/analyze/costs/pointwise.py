"""The shared model of a pointwise (elementwise) op: broadcast, promote, read once, write once."""
from __future__ import annotations

from dataclasses import dataclass

from kernel_advisor.analyze.costs import dtypes as dt
from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.common import io_cost, written
from kernel_advisor.analyze.costs.errors import Unmodelled
from kernel_advisor.analyze.costs.registry import OpCost, register
from kernel_advisor.analyze.costs.shapes import broadcast, numel

PROMOTE, FLOAT, BOOL, FIRST = "promote", "float", "bool", "first"


@dataclass(frozen=True)
class Pointwise:
    """How one elementwise op reads its arguments.

    operands: positions that may hold a tensor or Scalar operand (they broadcast and take part
        in type promotion); tensors after them are out= buffers and are ignored.
    flops: per output element. NB: every primitive counts 1 whether it is an add or a
        transcendental (exp, erf, tanh: tens of instructions on the SFU/FMA pipes) - the
        usual FLOP-counting convention; composite activations count their primitives.
    result: PROMOTE (torch's result_type), FLOAT (integers promote to float32, e.g. exp),
        BOOL (comparisons), FIRST (the dtype of the first operand, e.g. masked_fill).
    masks: positions of tensors that are read and broadcast but do not promote (where's cond).
    """

    operands: tuple[int, ...]
    flops: float = 1.0
    result: str = PROMOTE
    masks: tuple[int, ...] = ()


def _is_wrapped_number(t: Tensor) -> bool:
    # NB: Python numbers reach ATen as 0-dim CPU tensors of these dtypes; CUDA kernels take
    # them as kernel arguments, so they move no device memory.
    return t.shape == () and t.dtype in ("float64", "int64", "complex128", "bool")


def _result_dtype(call: OpCall, spec: Pointwise, operands: list[Tensor]) -> str:
    """torch's type promotion over the tensor operands and any Scalar operands."""
    scalars = [call.scalar_category(i) for i in spec.operands if call.is_scalar(i)]
    return dt.result_dtype([t.dtype for t in operands if t.shape],
                           [t.dtype for t in operands if not t.shape], scalars)


def pointwise_cost(call: OpCall, spec: Pointwise, inplace: bool) -> OpCost:
    operands = call.tensors(spec.operands)
    if not operands:
        raise Unmodelled(f"{call.name}: no tensor operand recorded")
    masks = call.tensors(spec.masks)
    out_shape = broadcast(*(t.shape for t in operands + masks))
    promoted = _result_dtype(call, spec, operands)
    if spec.result == FLOAT and dt.category(promoted) < 2:
        promoted = "float32"
    if inplace:
        self_ = call.tensor(spec.operands[0])
        if out_shape != self_.shape:
            raise Unmodelled(f"{call.name}: in-place result {out_shape} != self {self_.shape}")
        out_dtype = self_.dtype
    else:
        out_dtype = {BOOL: "bool", FIRST: operands[0].dtype}.get(spec.result, promoted)
    reads = [t for t in operands + masks if not _is_wrapped_number(t)]
    flops = spec.flops * numel(out_shape)
    return io_cost(flops, reads, [written(out_shape, out_dtype)], promoted)


def register_pointwise(names: str, spec: Pointwise, inplace_variants: bool = True) -> None:
    """Register each name (and its in-place `name_` variant) with this spec."""
    for name in names.split():
        register(name)(lambda call, s=spec: pointwise_cost(call, s, inplace=False))
        if inplace_variants:
            register(f"{name}_")(lambda call, s=spec: pointwise_cost(call, s, inplace=True))
