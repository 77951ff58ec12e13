"""Ops that launch no kernel: views, aliases and allocations. 0 flops, 0 bytes - modelled,
because knowing they cost nothing is different from not knowing their cost.

reshape, flatten and contiguous are not here: they copy when the layout requires it
(copies.py).
"""
from __future__ import annotations

from kernel_advisor.analyze.costs.call import OpCall
from kernel_advisor.analyze.costs.common import ZERO_COST_DTYPE, cost
from kernel_advisor.analyze.costs.registry import OpCost, register

VIEW_OPS = (
    "view", "_unsafe_view", "_reshape_alias", "view_as", "expand", "expand_as", "as_strided",
    "as_strided_", "transpose", "transpose_", "t", "t_", "permute", "slice", "select", "narrow",
    "unsqueeze", "unsqueeze_", "squeeze", "squeeze_", "split", "split_with_sizes",
    "unsafe_split", "unsafe_split_with_sizes", "chunk", "unsafe_chunk", "tensor_split",
    "unbind", "unflatten", "movedim", "moveaxis", "swapaxes", "swapdims", "diagonal", "unfold",
    "alias", "detach", "detach_", "lift_fresh", "view_as_real", "view_as_complex", "real",
    "imag", "numpy_T", "mT", "mH", "matrix_H", "adjoint", "_conj", "conj", "_neg_view",
    "resolve_conj", "resolve_neg", "hsplit", "vsplit", "dsplit",
)
ALLOCATION_OPS = (
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "resize_",
    "resize_as_", "set_", "result_type",
)


@register(*VIEW_OPS, *ALLOCATION_OPS)
def no_kernel(call: OpCall) -> OpCost:
    dtype = call.dtypes[0] if call.has_tensor(0) else ZERO_COST_DTYPE
    return cost(0, 0, dtype)
