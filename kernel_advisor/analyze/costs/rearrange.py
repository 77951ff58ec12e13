"""Rearrangements: tile, repeat_interleave, pixel and channel shuffles, im2col / col2im, and the
diagonal ops (diag, diag_embed, trace). No arithmetic but col2im's overlapping adds and trace's
sum: every element read once and written once in its new place (zero-filled around a diagonal).
"""
from __future__ import annotations

from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.common import io_cost, written
from kernel_advisor.analyze.costs.copies import copy_cost, repeated_cost
from kernel_advisor.analyze.costs.registry import OpCost, register
from kernel_advisor.analyze.costs.shapes import Unmodelled


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
