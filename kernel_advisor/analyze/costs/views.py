"""Ops that launch no kernel: views, aliases and allocations. 0 flops, 0 bytes - modelled,
because knowing they cost nothing is different from not knowing their cost.

Views are torch's (analyze/op_kinds.py: OpOverload.is_view and torch.Tag.inplace_view).
reshape, flatten, contiguous and to are not: they copy when the layout, dtype or device
requires it (copies.py prices that copy).
"""
from __future__ import annotations

from kernel_advisor.analyze.costs.call import OpCall
from kernel_advisor.analyze.costs.common import ZERO_COST_DTYPE, cost
from kernel_advisor.analyze.costs.registry import OpCost, register
from kernel_advisor.analyze.op_kinds import view_op_names

VIEW_OPS = tuple(sorted(view_op_names()))
# Allocations: a new tensor, nothing written (no tag says so); result_type only reads dtypes.
ALLOCATION_OPS = (
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_",
    "resize_as_", "set_", "result_type",
    "broadcast_tensors",  # views of its inputs (composite: no view tag)
)


@register(*sorted(set(VIEW_OPS) | set(ALLOCATION_OPS)))
def no_kernel(call: OpCall) -> OpCost:
    dtype = call.dtypes[0] if call.has_tensor(0) else ZERO_COST_DTYPE
    return cost(0, 0, dtype)
