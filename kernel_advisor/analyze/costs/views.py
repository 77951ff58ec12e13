"""Ops that launch no kernel: views, aliases and allocations. 0 flops, 0 bytes - modelled,
because knowing they cost nothing is different from not knowing their cost.

Views are torch's (analyze/op_kinds.py: OpOverload.is_view and torch.Tag.inplace_view).
reshape, flatten, contiguous and to are not: they copy when the layout, dtype or device
requires it (copies.py prices that copy).
"""
from __future__ import annotations

import math

from kernel_advisor.analyze.costs.call import OpCall
from kernel_advisor.analyze.costs.common import ZERO_COST_DTYPE, cost, io_cost, written
from kernel_advisor.analyze.costs.registry import OpCost, register
from kernel_advisor.analyze.costs.shapes import Unmodelled
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


# ------------------------------------------------------------
# Backward of views, pads, gathers and value-selecting reductions: the gradient placed into a
# tensor of the input's size.
#
# slice_backward(grad_output, input_sizes, dim, start, end, step) and select_backward(grad_output,
# input_sizes, dim, index) allocate zeros of input_sizes and copy the gradient into the slice:
# the full input-sized gradient is written once and grad_output read once, 0 FLOPs.
# reflection_pad{1,2,3}d_backward and replication_pad{1,2,3}d_backward(grad_output, self,
# padding) read the padded gradient once and write the input-sized one once; each border
# element of grad_output is added onto the element it was copied from: one add per element of
# grad_output outside the input (numel(grad_output) - numel(input), cropping pads excepted).
# gather_backward(grad, self, dim, index, sparse_grad) and value_selecting_reduction_backward(grad,
# dim, indices, sizes, keepdim) (max/min/topk/sort/median along a dim) scatter the gradient into
# zeros of the input's size: one add per gradient element, grad and indices read once.
# NB: the zero-fill is not counted apart from the write.

@register("slice_backward", "select_backward")
def view_backward(call: OpCall) -> OpCost:
    grad = call.tensor(0)
    sizes = call.ints_at(1)
    if math.prod(sizes) < grad.numel:
        raise Unmodelled(f"{call.name}: input sizes {sizes} smaller than the gradient {grad.shape}")
    return io_cost(0, [grad], [written(tuple(sizes), grad.dtype)], grad.dtype)


@register("reflection_pad1d_backward", "reflection_pad2d_backward", "reflection_pad3d_backward",
          "replication_pad1d_backward", "replication_pad2d_backward", "replication_pad3d_backward")
def pad_backward(call: OpCall) -> OpCost:
    grad, x = call.tensor(0), call.tensor(1)
    if len(grad.shape) != len(x.shape):
        raise Unmodelled(f"{call.name}: gradient {grad.shape} and input {x.shape} differ in rank")
    border_adds = max(grad.numel - x.numel, 0)
    return io_cost(border_adds, [grad], [written(x.shape, grad.dtype)], grad.dtype)


@register("gather_backward")
def gather_backward(call: OpCall) -> OpCost:
    grad, x, idx = call.tensor(0), call.tensor(1), call.tensor(3)
    return io_cost(grad.numel, [grad, idx], [written(x.shape, grad.dtype)], grad.dtype)


@register("value_selecting_reduction_backward")
def value_selecting_reduction_backward(call: OpCall) -> OpCost:
    grad, idx = call.tensor(0), call.tensor(2)
    sizes = call.ints_at(3)
    if math.prod(sizes) < grad.numel:
        raise Unmodelled(f"{call.name}: input sizes {sizes} smaller than the gradient {grad.shape}")
    return io_cost(grad.numel, [grad, idx], [written(tuple(sizes), grad.dtype)], grad.dtype)
