"""Max/average pooling 1-3d (plain and adaptive), forward and backward.

FLOPs: one compare or add per window element per output (max/avg pool); adaptive pools
visit each input element about once. NB: avg pool's divide per output is not counted.
Bytes: input read once, outputs (and int64 indices for the max variants) written once.
NB: overlapping windows re-read inputs from cache, not from HBM: not counted.
"""
from __future__ import annotations

import math

from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.common import io_cost, written
from kernel_advisor.analyze.costs.registry import OpCost, register
from kernel_advisor.analyze.costs.shapes import Unmodelled, expand_param, pool_out_size


def _spatial(call: OpCall) -> int:
    digit = next(ch for ch in call.name if ch.isdigit())
    return int(digit)


def _window_out(call: OpCall, x: Tensor, spatial: int, positions: tuple) -> tuple:
    """positions: (kernel, stride, padding, dilation or None, ceil_mode)."""
    k_pos, s_pos, p_pos, d_pos, c_pos = positions
    if len(x.shape) not in (spatial + 1, spatial + 2):
        raise Unmodelled(f"{call.name}: input {x.shape} is not {spatial}-d spatial")
    kernel = expand_param(call.ints_at(k_pos), spatial, "kernel_size")
    stride_given = call.ints_at(s_pos)
    stride = expand_param(stride_given, spatial, "stride") if stride_given else kernel
    padding = expand_param(call.ints_at(p_pos), spatial, "padding")
    dilation = expand_param(call.ints_at(d_pos), spatial, "dilation") if d_pos else (1,) * spatial
    ceil_mode = call.bool_at(c_pos)
    if min(stride) <= 0 or min(kernel) <= 0:
        raise Unmodelled(f"{call.name}: non-positive kernel or stride")
    lead = x.shape[:len(x.shape) - spatial]
    sizes = [pool_out_size(n, *params, ceil_mode)
             for n, params in zip(x.shape[-spatial:], zip(kernel, stride, padding, dilation))]
    if min(sizes) <= 0:
        raise Unmodelled(f"{call.name}: empty output {sizes}")
    return (*lead, *sizes), math.prod(kernel)


_MAX = (1, 2, 3, 4, 5)  # (self, kernel_size, stride, padding, dilation, ceil_mode)
_AVG = (1, 2, 3, None, 4)  # (self, kernel_size, stride, padding, ceil_mode, ...)


def _pool(call: OpCall, positions: tuple, with_indices: bool) -> OpCost:
    x = call.tensor(0)
    out_shape, window = _window_out(call, x, _spatial(call), positions)
    outs = [written(out_shape, x.dtype)]
    if with_indices:
        outs.append(written(out_shape, "int64"))
    return io_cost(window * math.prod(out_shape), [x], outs, x.dtype)


@register("max_pool1d", "max_pool2d", "max_pool3d", "mkldnn_max_pool2d", "mkldnn_max_pool3d")
def max_pool(call: OpCall) -> OpCost:
    return _pool(call, _MAX, with_indices=False)


@register("max_pool1d_with_indices", "max_pool2d_with_indices", "max_pool3d_with_indices")
def max_pool_with_indices(call: OpCall) -> OpCost:
    return _pool(call, _MAX, with_indices=True)


@register("avg_pool1d", "avg_pool2d", "avg_pool3d")
def avg_pool(call: OpCall) -> OpCost:
    return _pool(call, _AVG, with_indices=False)


@register("max_pool2d_with_indices_backward", "max_pool3d_with_indices_backward")
def max_pool_backward(call: OpCall) -> OpCost:
    # (grad_output, self, kernel, stride, padding, dilation, ceil_mode, indices): each grad
    # is added at its argmax; self is only used for its shape.
    grad, x, idx = call.tensor(0), call.tensor(1), call.tensor(7)
    return io_cost(grad.numel, [grad, idx], [written(x.shape, x.dtype)], x.dtype)


@register("avg_pool2d_backward", "avg_pool3d_backward")
def avg_pool_backward(call: OpCall) -> OpCost:
    # (grad_output, self, kernel, stride, padding, ceil_mode, count_include_pad, divisor)
    grad, x = call.tensor(0), call.tensor(1)
    window = math.prod(expand_param(call.ints_at(2), _spatial(call), "kernel_size"))
    return io_cost(window * grad.numel, [grad], [written(x.shape, x.dtype)], x.dtype)


def _adaptive(call: OpCall, with_indices: bool) -> OpCost:
    # (self, output_size): NB: windows overlap by at most one element when the sizes do not
    # divide, so each input element is visited about once.
    x = call.tensor(0)
    spatial = _spatial(call)
    sizes = expand_param(call.ints_at(1), spatial, "output_size")
    if len(x.shape) not in (spatial + 1, spatial + 2):
        raise Unmodelled(f"{call.name}: input {x.shape} is not {spatial}-d spatial")
    out_shape = (*x.shape[:len(x.shape) - spatial], *sizes)
    outs = [written(out_shape, x.dtype)]
    if with_indices:
        outs.append(written(out_shape, "int64"))
    return io_cost(x.numel, [x], outs, x.dtype)


@register("adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d",
          "_adaptive_avg_pool2d", "_adaptive_avg_pool3d")
def adaptive_avg_pool(call: OpCall) -> OpCost:
    return _adaptive(call, with_indices=False)


@register("adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d")
def adaptive_max_pool(call: OpCall) -> OpCost:
    return _adaptive(call, with_indices=True)


@register("_adaptive_avg_pool2d_backward", "_adaptive_avg_pool3d_backward")
def adaptive_avg_pool_backward(call: OpCall) -> OpCost:
    # (grad_output, self): every input position receives its window's gradient share.
    grad, x = call.tensor(0), call.tensor(1)
    return io_cost(x.numel, [grad], [written(x.shape, x.dtype)], x.dtype)


@register("adaptive_max_pool2d_backward", "adaptive_max_pool3d_backward")
def adaptive_max_pool_backward(call: OpCall) -> OpCost:
    # (grad_output, self, indices)
    grad, x, idx = call.tensor(0), call.tensor(1), call.tensor(2)
    return io_cost(grad.numel, [grad, idx], [written(x.shape, x.dtype)], x.dtype)
