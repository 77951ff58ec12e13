"""Rearrangements: tile, repeat_interleave, pixel and channel shuffles, im2col / col2im, and the
diagonal ops (diag, diag_embed, trace). No arithmetic but col2im's overlapping adds and trace's
sum: every element read once and written once in its new place (zero-filled around a diagonal).
"""
from __future__ import annotations

import math

from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.copies import copy_cost, repeated_cost
from kernel_advisor.analyze.costs.registry import ZERO_COST_DTYPE, OpCost, cost, io_cost, register, written
from kernel_advisor.analyze.costs.shapes import Unmodelled
from kernel_advisor.analyze.op_kinds import view_op_names


@register("tile")
def tile(call: OpCall) -> OpCost:
    # tile(self, dims): repeat, with dims padded by leading 1s when shorter than self's rank.
    x = call.tensor(0)
    reps = call.ints_at(1)
    return repeated_cost(x, (1,) * (len(x.shape) - len(reps)) + reps)


@register("pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle")
def pixel_shuffle(call: OpCall) -> OpCost:
    # A permutation of the elements: read once, written once in the new layout.
    x = call.tensor(0)
    return copy_cost(x, (x.numel,), x.dtype)


@register("im2col")
def im2col(call: OpCall) -> OpCost:
    # im2col(self [N, C, H, W], kernel_size, dilation, padding, stride) -> [N, C*kh*kw, L]:
    # the input read once (overlapping windows come from cache), every column element written.
    x = call.tensor(0)
    (kh, kw), (dh, dw), (ph, pw), (sh, sw) = (call.ints_at(i) for i in range(1, 5))
    if len(x.shape) not in (3, 4):
        raise Unmodelled(f"{call.name}: input must be 3-D or 4-D, got {x.shape}")
    h, w = x.shape[-2:]
    out_h, out_w = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    lead = x.shape[:-3] + (x.shape[-3] * kh * kw, max(out_h, 0) * max(out_w, 0))
    return copy_cost(x, lead, x.dtype)


@register("col2im")
def col2im(call: OpCall) -> OpCost:
    # col2im(self [N, C*kh*kw, L], output_size, kernel_size, dilation, padding, stride) -> [N, C, H, W]:
    # every column element added into its image position, the image written once.
    x = call.tensor(0)
    (h, w), (kh, kw) = call.ints_at(1), call.ints_at(2)
    if len(x.shape) not in (2, 3) or x.shape[-2] % (kh * kw):
        raise Unmodelled(f"{call.name}: {x.shape} does not hold {kh}x{kw} columns")
    out = written(x.shape[:-2] + (x.shape[-2] // (kh * kw), h, w), x.dtype)
    return io_cost(x.numel, [x], [out], x.dtype)


@register("repeat_interleave")
def repeat_interleave(call: OpCall) -> OpCost:
    # repeat_interleave.self_int(self, repeats: int, dim, output_size): each slice copied
    # `repeats` times (a tensor of repeats makes the size data-dependent: unmodelled).
    x = call.tensor(0)
    if call.has_tensor(1):
        raise Unmodelled(f"{call.name}: per-element repeats")
    reps, dim = call.int_at(1), call.int_at(2, None)
    if dim is None:
        return copy_cost(x, (x.numel * reps,), x.dtype)
    dim = dim % max(len(x.shape), 1)
    return copy_cost(x, x.shape[:dim] + (x.shape[dim] * reps,) + x.shape[dim + 1:], x.dtype)


@register("diag", "diagonal_copy")
def diag(call: OpCall) -> OpCost:
    # diag(self, diagonal): a vector becomes a zero-filled square matrix, a matrix gives its diagonal.
    x, k = call.tensor(0), abs(call.int_at(1, 0))
    if len(x.shape) == 1:
        n = x.shape[0] + k
        return copy_cost(x, (n, n), x.dtype)
    if len(x.shape) == 2:
        n = max(min(x.shape[0], x.shape[1] - k) if call.int_at(1, 0) >= 0 else min(x.shape[0] - k, x.shape[1]), 0)
        return io_cost(0, [Tensor((n,), x.dtype)], [written((n,), x.dtype)], x.dtype)
    raise Unmodelled(f"{call.name}: {len(x.shape)}-D input")


@register("diag_embed")
def diag_embed(call: OpCall) -> OpCost:
    # diag_embed(self [..., n], offset, dim1, dim2): a zero-filled [..., n+|offset|, n+|offset|] output.
    x = call.tensor(0)
    if not x.shape:
        raise Unmodelled(f"{call.name}: 0-dim input")
    n = x.shape[-1] + abs(call.int_at(1, 0))
    return copy_cost(x, x.shape[:-1] + (n, n), x.dtype)


@register("trace")
def trace(call: OpCall) -> OpCost:
    # trace(self [h, w]): min(h, w) diagonal elements read and summed.
    x = call.tensor(0)
    if len(x.shape) != 2:
        raise Unmodelled(f"{call.name}: {len(x.shape)}-D input")
    n = min(x.shape)
    return io_cost(n, [Tensor((n,), x.dtype)], [written((), x.dtype)], x.dtype)


# ------------------------------------------------------------
# Ops that launch no kernel: views, aliases and allocations. 0 flops, 0 bytes - modelled,
# because knowing they cost nothing is different from not knowing their cost.
#
# Views are torch's (analyze/op_kinds.py: OpOverload.is_view and torch.Tag.inplace_view).
# reshape, flatten, contiguous and to are not: they copy when the layout, dtype or device
# requires it (copies.py prices that copy).

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
