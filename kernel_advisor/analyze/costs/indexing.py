"""Gathers and scatters: embedding, index_select, gather, scatter*, index_add/copy/put, index.

Bytes count only the elements actually gathered or scattered, plus the index tensors: a
gather of R rows reads R rows, not the whole table. NB: each gathered element really pulls a
32-byte sector, so gathers of small rows move more than this minimum.
Out-of-place scatters first copy `self` (read + write of the full tensor).
"""
from __future__ import annotations

import math

from kernel_advisor.analyze.costs import dtypes as dt
from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.copies import copy_cost, repeated_cost
from kernel_advisor.analyze.costs.registry import ZERO_COST_DTYPE, OpCost, cost, io_cost, register, written
from kernel_advisor.analyze.costs.shapes import Unmodelled, broadcast, wrap_dim
from kernel_advisor.analyze.op_kinds import view_op_names


def _elements(count: int, dtype: str) -> int:
    return count * dt.checked_itemsize_bytes(dtype)


@register("embedding")
def embedding(call: OpCall) -> OpCost:
    # embedding(weight [V, D], indices [...]) -> [..., D]: one row gathered per index.
    weight, idx = call.tensor(0), call.tensor(1)
    if len(weight.shape) != 2:
        raise Unmodelled(f"{call.name}: weight must be 2-D, got {weight.shape}")
    out = written((*idx.shape, weight.shape[1]), weight.dtype)
    return cost(0, idx.bytes + 2 * out.bytes, weight.dtype)


@register("embedding_dense_backward", "embedding_backward")
def embedding_backward(call: OpCall) -> OpCost:
    # (grad_output [..., D], indices, num_weights, padding_idx, scale_grad_by_freq[, sparse]):
    # the [num_weights, D] gradient is written once and every grad row added into it.
    # NB: the zero-fill and the read-modify-write of touched rows are not counted apart.
    grad, idx = call.tensor(0), call.tensor(1)
    rows = call.int_at(2)
    width = grad.shape[-1] if grad.shape else 1
    out = written((rows, width), grad.dtype)
    return io_cost(grad.numel, [grad, idx], [out], grad.dtype)


@register("index_select")
def index_select(call: OpCall) -> OpCost:
    # index_select(self, dim, index): the selected slices are read and written once.
    x, idx = call.tensor(0), call.tensor(2)
    dim = wrap_dim(call.int_at(1), len(x.shape))
    out_shape = x.shape[:dim] + (idx.numel,) + x.shape[dim + 1:] if x.shape else ()
    out = written(out_shape, x.dtype)
    return cost(0, idx.bytes + 2 * out.bytes, x.dtype)


@register("gather")
def gather(call: OpCall) -> OpCost:
    # gather(self, dim, index, sparse_grad) -> index-shaped: one element read per index.
    x, idx = call.tensor(0), call.tensor(2)
    out = written(idx.shape, x.dtype)
    return cost(0, idx.bytes + 2 * out.bytes, x.dtype)


def _scatter(call: OpCall, target: Tensor, idx: Tensor, src: Tensor | None, updates: int,
             accumulate: bool) -> OpCost:
    """updates: elements written into target; accumulate: read-modify-write of each."""
    moved = idx.bytes + _elements(updates, target.dtype) * (2 if accumulate else 1)
    if src is not None and src.shape:
        moved += _elements(updates, src.dtype)
    if not call.name.endswith("_"):
        moved += 2 * target.bytes  # out-of-place: self is copied first
    return cost(updates if accumulate else 0, moved, target.dtype)


@register("scatter", "scatter_", "scatter_add", "scatter_add_", "scatter_reduce",
          "scatter_reduce_")
def scatter(call: OpCall) -> OpCost:
    # scatter(self, dim, index, src|value[, reduce]): index.numel elements of src are written.
    x, idx, src = call.tensor(0), call.tensor(2), call.optional_tensor(3)
    # scatter.reduce / value_reduce carry a 5th `reduce` argument; scatter.out a 5th tensor.
    accumulate = ("add" in call.name or "reduce" in call.name
                  or (call.arg_count() > 4 and not call.has_tensor(4)))
    return _scatter(call, x, idx, src, idx.numel, accumulate)


@register("index_add", "index_add_", "index_copy", "index_copy_", "index_fill",
          "index_fill_")
def index_add(call: OpCall) -> OpCost:
    # index_add(self, dim, index, source[, alpha]): source slices go to index positions.
    x, idx = call.tensor(0), call.tensor(2)
    src = call.optional_tensor(3)
    dim = wrap_dim(call.int_at(1), len(x.shape))
    updates = src.numel if src is not None and src.shape else \
        idx.numel * math.prod(x.shape) // max(x.shape[dim] if x.shape else 1, 1)
    return _scatter(call, x, idx, src, updates, "add" in call.name)


@register("index_put", "index_put_", "_index_put_impl_")
def index_put(call: OpCall) -> OpCost:
    # index_put(self, indices, values, accumulate): the profiler records neither the index
    # tensors nor their count, so a broadcast (0-dim) value writes an unknown number of
    # elements. NB: with values recorded, the index reads are not counted (lower bound).
    x, values = call.tensor(0), call.tensor(2)
    if not values.shape:
        raise Unmodelled(f"{call.name}: a broadcast value writes an unrecorded element count")
    moved = values.bytes + _elements(values.numel, x.dtype) * (2 if call.bool_at(3) else 1)
    if call.name == "aten::index_put":
        moved += 2 * x.bytes
    return cost(values.numel if call.bool_at(3) else 0, moved, x.dtype)


@register("index", "_unsafe_index")
def index(call: OpCall) -> OpCost:
    # index(self, indices): one element of self read per output element, the output written.
    # torch.profiler records the Tensor?[] indices as nothing; attribution then puts the
    # output's size in their concrete slot (collect.attribute._index_sizes_from_views).
    # NB: there the index tensors themselves are not counted.
    x = call.tensor(0)
    if not call.is_list_arg(1):
        out = written(call.ints_at(1), x.dtype)
        return cost(0, 2 * out.bytes, x.dtype)
    indices = call.tensor_list(1)
    if not indices or any(dt.category(t.dtype) != 1 for t in indices) or len(indices) > len(x.shape):
        raise Unmodelled(f"{call.name}: only integer index tensors are modelled")
    out_shape = broadcast(*(t.shape for t in indices)) + x.shape[len(indices):]
    out = written(out_shape, x.dtype)
    return cost(0, sum(t.bytes for t in indices) + 2 * out.bytes, x.dtype)


EMBEDDING_BAG_SUM, EMBEDDING_BAG_MEAN, EMBEDDING_BAG_MAX = 0, 1, 2


def embedding_bag_flops(gathered: int, bags: int, width: int, mode: int,
                        weighted: bool) -> int:
    """One add (sum, mean) or compare (max) per gathered element, one multiply more with
    per_sample_weights, one divide per output element for mean."""
    per_gathered = 1 + (1 if weighted else 0)
    return per_gathered * gathered * width + (bags * width if mode == EMBEDDING_BAG_MEAN else 0)


@register("embedding_bag", "_embedding_bag", "_embedding_bag_forward_only")
def embedding_bag(call: OpCall) -> OpCost:
    # embedding_bag(weight [V, D], indices, offsets, scale_grad_by_freq, mode, sparse,
    #               per_sample_weights, include_last_offset, padding_idx) -> [bags, D]:
    # 1-D indices with offsets (one bag per offset; the last is an end marker when
    # include_last_offset), or 2-D indices [bags, L] without offsets.
    # NB: indices equal to padding_idx are skipped by the kernel; counted here.
    # NB: the bookkeeping outputs (offset2bag, bag_size, max_indices) are not counted.
    weight, idx = call.tensor(0), call.tensor(1)
    offsets = call.optional_tensor(2)
    if len(weight.shape) != 2 or len(idx.shape) not in (1, 2):
        raise Unmodelled(f"{call.name}: weight {weight.shape}, indices {idx.shape}")
    mode = call.int_at(4, EMBEDDING_BAG_SUM)
    if mode not in (EMBEDDING_BAG_SUM, EMBEDDING_BAG_MEAN, EMBEDDING_BAG_MAX):
        raise Unmodelled(f"{call.name}: unknown mode {mode}")
    if len(idx.shape) == 2:
        bags = idx.shape[0]
    elif offsets is not None and len(offsets.shape) == 1:
        bags = offsets.shape[0] - (1 if call.bool_at(7, False) else 0)
    else:
        raise Unmodelled(f"{call.name}: 1-D indices without offsets")
    per_sample = call.optional_tensor(6)
    width = weight.shape[1]
    gathered = written((idx.numel, width), weight.dtype)
    out = written((max(bags, 0), width), weight.dtype)
    flops = embedding_bag_flops(idx.numel, bags, width, mode, per_sample is not None)
    moved = idx.bytes + gathered.bytes + out.bytes + sum(
        t.bytes for t in (offsets, per_sample) if t is not None)
    return cost(flops, moved, weight.dtype)


@register("_embedding_bag_backward", "_embedding_bag_dense_backward")
def embedding_bag_backward(call: OpCall) -> OpCost:
    # _embedding_bag_backward(grad [bags, D], indices, offsets, offset2bag, bag_size,
    #     maximum_indices, num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights,
    #     padding_idx); _embedding_bag_dense_backward takes the same without offsets and sparse.
    # Dense: a [num_weights, D] gradient written once, each index adding its bag's gradient row
    # (times its per-sample weight); sparse: one gradient row written per index.
    # NB: the grad row of a bag is read once, however many indices share it (from cache).
    dense = call.name.endswith("_dense_backward")
    grad, idx = call.tensor(0), call.tensor(1)
    if len(grad.shape) != 2:
        raise Unmodelled(f"{call.name}: grad must be 2-D, got {grad.shape}")
    tail = 5 if dense else 6  # num_weights
    num_weights, mode = call.int_at(tail), call.int_at(tail + 2)
    sparse = False if dense else call.bool_at(tail + 3)
    per_sample = call.optional_tensor(tail + 3 if dense else tail + 4)
    if mode not in (EMBEDDING_BAG_SUM, EMBEDDING_BAG_MEAN, EMBEDDING_BAG_MAX):
        raise Unmodelled(f"{call.name}: unknown mode {mode}")
    width = grad.shape[1]
    rows = idx.numel if sparse else num_weights
    out = written((rows, width), grad.dtype)
    # max: each bag's gradient goes to its arg-max rows alone, one add per output element
    flops = (grad.numel if mode == EMBEDDING_BAG_MAX else
             embedding_bag_flops(idx.numel, grad.shape[0], width, mode, per_sample is not None))
    bookkeeping = call.tensors(range(2, tail))  # offsets, offset2bag, bag_size, max indices
    return io_cost(flops, [grad, idx, *bookkeeping, per_sample], [out], grad.dtype)


@register("embedding_renorm_")
def embedding_renorm_(call: OpCall) -> OpCost:
    # embedding_renorm_(self [V, D], indices, max_norm, norm_type): each looked-up row's norm
    # (2 flops an element) and its rescale (1) in place. NB: rows are counted once per index,
    # an upper bound when indices repeat.
    weight, idx = call.tensor(0), call.tensor(1)
    if len(weight.shape) != 2:
        raise Unmodelled(f"{call.name}: weight must be 2-D, got {weight.shape}")
    rows = written((min(idx.numel, weight.shape[0]), weight.shape[1]), weight.dtype)
    return cost(3 * rows.numel, idx.bytes + 2 * rows.bytes, weight.dtype)


# ------------------------------------------------------------
# Rearrangements: tile, repeat_interleave, pixel and channel shuffles, im2col / col2im, and the
# diagonal ops (diag, diag_embed, trace). No arithmetic but col2im's overlapping adds and trace's
# sum: every element read once and written once in its new place (zero-filled around a diagonal).

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
