"""Sampling and binning: grid_sampler (2-D and 3-D), max_unpool, bucketize, searchsorted, histc.

grid_sampler: per output point and channel, bilinear reads 4 taps (trilinear 8) and blends
them, 2 flops a tap; nearest 0; bicubic 16 taps. Bytes: the input read once (taps come from
cache), the grid read once, the output written once. Backward: twice the forward's taps (the
input's and the grid's gradients), grad_output, input and grid read, both gradients written. max_unpool: the output zero-filled and one
element scattered per input element. bucketize and searchsorted: log2(boundaries) compares
per element, an int64 (or int32) index written per element. histc: one add per element.
affine_grid_generator: each output point is theta (2x3, or 3x4 in 3-D) times its base
coordinate: 12 flops a 2-D point, 24 a 3-D one; theta read, the grid written.
"""
from __future__ import annotations

import math

from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.common import io_cost, written
from kernel_advisor.analyze.costs.errors import Unmodelled
from kernel_advisor.analyze.costs.registry import OpCost, register

# interpolation_mode codes of grid_sampler: 0 bilinear, 1 nearest, 2 bicubic
TAPS_2D = {0: 4, 1: 0, 2: 16}
TAPS_3D = {0: 8, 1: 0}
FLOPS_PER_TAP = 2


@register("grid_sampler", "grid_sampler_2d", "grid_sampler_3d", "cudnn_grid_sampler")
def grid_sampler(call: OpCall) -> OpCost:
    # grid_sampler(input [N, C, *in], grid [N, *out, d], interpolation_mode, padding_mode, align_corners)
    x, grid = call.tensor(0), call.tensor(1)
    spatial = len(grid.shape) - 2
    if spatial not in (2, 3) or len(x.shape) != spatial + 2 or grid.shape[-1] != spatial:
        raise Unmodelled(f"{call.name}: input {x.shape} and grid {grid.shape} do not fit")
    mode = call.int_at(2, 0) if call.name != "aten::cudnn_grid_sampler" else 0
    taps = (TAPS_2D if spatial == 2 else TAPS_3D).get(mode)
    if taps is None:
        raise Unmodelled(f"{call.name}: interpolation mode {mode}")
    out = written(x.shape[:2] + grid.shape[1:-1], x.dtype)
    return io_cost(FLOPS_PER_TAP * taps * out.numel, [x, grid], [out], x.dtype)


@register("max_unpool2d", "max_unpool3d")
def max_unpool(call: OpCall) -> OpCost:
    # max_unpool2d(self [N, C, h, w], indices, output_size) | max_unpool3d(..., output_size, stride, padding)
    x, idx = call.tensor(0), call.tensor(1)
    size = call.ints_at(2)
    out = written(x.shape[:-len(size)] + tuple(size), x.dtype)
    return io_cost(0, [x, idx], [out], x.dtype)


def _binned(values: Tensor, boundaries: Tensor, out_int32: bool) -> OpCost:
    steps = math.ceil(math.log2(boundaries.shape[-1] + 1)) if boundaries.shape else 1
    out = written(values.shape, "int32" if out_int32 else "int64")
    return io_cost(steps * values.numel, [values, boundaries], [out], values.dtype)


@register("bucketize")
def bucketize(call: OpCall) -> OpCost:
    # bucketize(self, boundaries, out_int32, right)
    if not call.has_tensor(0):
        raise Unmodelled(f"{call.name}: a scalar input")
    return _binned(call.tensor(0), call.tensor(1), call.bool_at(2, False))


@register("searchsorted")
def searchsorted(call: OpCall) -> OpCost:
    # searchsorted(sorted_sequence, self, out_int32, right, side, sorter)
    if not call.has_tensor(1):
        raise Unmodelled(f"{call.name}: a scalar input")
    return _binned(call.tensor(1), call.tensor(0), call.bool_at(2, False))


@register("histc")
def histc(call: OpCall) -> OpCost:
    # histc(self, bins, min, max)
    x = call.tensor(0)
    return io_cost(x.numel, [x], [written((call.int_at(1, 100),), x.dtype)], x.dtype)


@register("grid_sampler_2d_backward", "grid_sampler_3d_backward")
def grid_sampler_backward(call: OpCall) -> OpCost:
    # (grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask)
    grad, x, grid = call.tensor(0), call.tensor(1), call.tensor(2)
    spatial = len(grid.shape) - 2
    taps = (TAPS_2D if spatial == 2 else TAPS_3D).get(call.int_at(3, 0))
    if taps is None or len(x.shape) != spatial + 2:
        raise Unmodelled(f"{call.name}: input {x.shape}, grid {grid.shape}, mode {call.int_at(3, 0)}")
    need_input, need_grid = call.bools_at(6, (True, True))
    writes = [written(x.shape, x.dtype) if need_input else None, written(grid.shape, grid.dtype) if need_grid else None]
    return io_cost(2 * FLOPS_PER_TAP * taps * grad.numel, [grad, x, grid], writes, x.dtype)


@register("affine_grid_generator")
def affine_grid_generator(call: OpCall) -> OpCost:
    # affine_grid_generator(theta [N, 2, 3] | [N, 3, 4], size [N, C, H, W] | [N, C, D, H, W], align_corners)
    theta, size = call.tensor(0), call.ints_at(1)
    spatial = len(size) - 2
    if spatial not in (2, 3) or theta.shape[1:] != (spatial, spatial + 1):
        raise Unmodelled(f"{call.name}: theta {theta.shape} does not fit size {size}")
    points = math.prod((size[0], *size[2:]))
    out = written((size[0], *size[2:], spatial), theta.dtype)
    return io_cost(2 * spatial * (spatial + 1) * points, [theta], [out], theta.dtype)
