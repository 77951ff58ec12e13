"""The cost record, the per-op formula registry and the lookup everything else calls."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from kernel_advisor.analyze.costs.call import OpCall
from kernel_advisor.analyze.costs.shapes import Unmodelled


@dataclass(frozen=True)
class OpCost:
    flops: float  # per call
    bytes: float  # minimum bytes per call: each input read once, each output written once
    compute_dtype: str  # torch dtype name deciding the compute path, e.g. "float32", "bfloat16"
    uses_tensor_cores: bool  # matmul/conv/attention family (tensor-core eligible)


Formula = Callable[[OpCall], OpCost]
_FORMULAS: dict[str, Formula] = {}


def qualified(name: str) -> str:
    return name if "::" in name else f"aten::{name}"


def register(*names: str) -> Callable[[Formula], Formula]:
    """Register a formula for ops named like the trace names them ("mm" means "aten::mm")."""

    def add(formula: Formula) -> Formula:
        for name in names:
            key = qualified(name)
            if key in _FORMULAS:
                raise RuntimeError(f"two cost formulas registered for {key}")
            _FORMULAS[key] = formula
        return formula

    return add


def op_cost(name: str, input_shapes: Sequence, input_dtypes: Sequence,
            concrete_inputs: Sequence | None) -> OpCost | None:
    """FLOPs and minimum bytes of one call, or None when the op or these arguments are not
    modelled (unknown is not zero)."""
    formula = _FORMULAS.get(name)
    if formula is None:
        return None
    try:
        call = OpCall.from_trace(name, input_shapes, input_dtypes, concrete_inputs)
        return formula(call)
    except Unmodelled:
        return None


def cost_arguments(name: str, input_shapes: Sequence, input_dtypes: Sequence,
                   concrete_inputs: Sequence | None) -> tuple[tuple[int, str], ...]:
    """The concrete (non-tensor) arguments this call's cost depends on, as (position, text).

    These are exactly the values the op's formula reads (stride, padding, groups, dims,
    scale factors, ...): two calls with equal shapes, dtypes and cost arguments cost the
    same, so op rows may merge them; calls that differ in any of them may not. Views'
    offsets and indices, which no formula reads, are left out, and a Scalar operand read
    only for type promotion counts by its category (`x * 0.5` and `x * 0.25` share a row).
    Empty for unmodelled ops.
    """
    formula = _FORMULAS.get(name)
    if formula is None:
        return ()
    try:
        call = OpCall.from_trace(name, input_shapes, input_dtypes, concrete_inputs)
    except Unmodelled:
        return ()
    try:
        formula(call)
    except Unmodelled:
        pass  # the values read before giving up still tell the calls apart
    return tuple(sorted(call.reads.items()))


def modelled_op_names() -> frozenset[str]:
    return frozenset(_FORMULAS)
