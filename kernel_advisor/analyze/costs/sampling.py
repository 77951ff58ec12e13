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

from kernel_advisor.analyze.costs import dtypes as dt
from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.registry import OpCost, io_cost, register, written
from kernel_advisor.analyze.costs.shapes import Unmodelled, expand_param, pool_out_size, wrap_dim

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


# ------------------------------------------------------------
# Upsampling / interpolation: upsample_{nearest,linear,bilinear,bicubic,trilinear}{1,2,3}d,
# _upsample_nearest_exact*, the antialiased _upsample_*_aa, their .vec overloads (the ones
# F.interpolate calls) and backward ops.
#
# The output size is the recorded output_size, else floor(input size * scale factor) per
# spatial dim, as ATen's compute_output_size does.
# FLOPs per output element (per channel): a weighted sum over the interpolation taps,
# taps multiplies and taps - 1 adds: nearest 0 (a copy), linear 3 (2 taps), bilinear 7 (4),
# bicubic 31 (16), trilinear 15 (8). NB: the weight and index arithmetic is not counted.
# Antialiased modes are separable: one 1-D pass per spatial dim with
# ceil(support) * 2 + 1 taps, support = (interp_size / 2) * max(in / out, 1) - ATen's
# _compute_indices_weights_aa; NB: each pass is counted over the whole output.
# Backward ops scatter-add the same taps: the same FLOPs per grad_output element.
# Bytes: the input read once and the output written once.

# op -> (spatial dims, interpolation taps per output element). Their .vec overloads take
# (input, output_size?, scale_factors?) for nearest modes and
# (input, output_size?, align_corners, scale_factors?) for the others.
_MODES = {
    "upsample_nearest1d": (1, 1), "upsample_nearest2d": (2, 1), "upsample_nearest3d": (3, 1),
    "_upsample_nearest_exact1d": (1, 1), "_upsample_nearest_exact2d": (2, 1),
    "_upsample_nearest_exact3d": (3, 1),
    "upsample_linear1d": (1, 2), "upsample_bilinear2d": (2, 4), "upsample_trilinear3d": (3, 8),
    "upsample_bicubic2d": (2, 16),
}
_AA_INTERP_SIZE = {"_upsample_bilinear2d_aa": 2, "_upsample_bicubic2d_aa": 4}


def interpolation_flops_per_output(taps: int) -> int:
    """taps multiplies + (taps - 1) adds; nearest (1 tap) is a plain copy."""
    return 0 if taps <= 1 else 2 * taps - 1


def aa_flops_per_output(interp_size: int, in_sizes: tuple[int, ...],
                        out_sizes: tuple[int, ...]) -> int:
    """Antialiased interpolation: one separable pass per dim, 2 flops per tap."""
    total = 0
    for i, o in zip(in_sizes, out_sizes):
        scale = i / o if o else 1.0
        support = interp_size / 2 * scale if scale >= 1.0 else interp_size / 2
        total += 2 * (math.ceil(support) * 2 + 1)
    return total


def output_spatial(in_spatial: tuple[int, ...], output_size: tuple[int, ...] | None,
                   scale_factors: tuple[float, ...] | None) -> tuple[int, ...]:
    """ATen's compute_output_size: output_size if given, else floor(size * scale)."""
    if output_size is not None:
        if len(output_size) != len(in_spatial):
            raise Unmodelled(f"output_size {output_size} does not fit {in_spatial}")
        return tuple(output_size)
    if scale_factors is None or len(scale_factors) != len(in_spatial):
        raise Unmodelled(f"no output size or scale factors for {in_spatial}")
    if not all(math.isfinite(f) and f > 0 for f in scale_factors):
        raise Unmodelled(f"scale factors {scale_factors} are not positive numbers")
    return tuple(int(s * f) for s, f in zip(in_spatial, scale_factors))


def _spec(name: str) -> tuple[int, int | None, bool]:
    """(spatial dims, taps or None for antialiased, nearest-family)."""
    base = name.removeprefix("aten::").removesuffix("_backward")
    if base in _MODES:
        dims, taps = _MODES[base]
        return dims, taps, taps == 1
    if base in _AA_INTERP_SIZE:
        return 2, None, False
    raise Unmodelled(f"{name}: not an upsample op")


def _flops_per_output(name: str, in_spatial: tuple, out_spatial: tuple) -> int:
    base = name.removeprefix("aten::").removesuffix("_backward")
    if base in _AA_INTERP_SIZE:
        return aa_flops_per_output(_AA_INTERP_SIZE[base], in_spatial, out_spatial)
    return interpolation_flops_per_output(_MODES[base][1])


@register(*_MODES, *_AA_INTERP_SIZE)
def upsample(call: OpCall) -> OpCost:
    # upsample_bilinear2d(self, output_size, align_corners, scales_h, scales_w) |
    # upsample_bilinear2d.vec(input, output_size?, align_corners, scale_factors?);
    # nearest modes have no align_corners. Either way output_size is argument 1.
    dims, _, nearest = _spec(call.name)
    x = call.tensor(0)
    if len(x.shape) != dims + 2:
        raise Unmodelled(f"{call.name}: expected {dims + 2}-D input, got {x.shape}")
    in_spatial = x.shape[2:]
    output_size = call.ints_at(1, None)
    scales = None if output_size is not None else call.floats_at(2 if nearest else 3, None)
    out_spatial = output_spatial(in_spatial, output_size, scales)
    out = written(x.shape[:2] + out_spatial, x.dtype)
    flops = _flops_per_output(call.name, in_spatial, out_spatial) * out.numel
    return io_cost(flops, [x], [out], x.dtype)


@register(*(f"{n}_backward" for n in (*_MODES, *_AA_INTERP_SIZE)))
def upsample_backward(call: OpCall) -> OpCost:
    # upsample_bilinear2d_backward(grad_output, output_size, input_size, align_corners, ...)
    # | .vec(grad_output, output_size?, input_size, align_corners, scale_factors?):
    # grad_input (input_size) receives the taps of every grad_output element.
    dims, _, _ = _spec(call.name)
    grad = call.tensor(0)
    input_size = call.ints_at(2)
    if len(grad.shape) != dims + 2 or len(input_size) != dims + 2:
        raise Unmodelled(f"{call.name}: expected {dims + 2}-D tensors")
    grad_in = written(tuple(input_size), grad.dtype)
    flops = _flops_per_output(call.name, tuple(input_size[2:]), grad.shape[2:]) * grad.numel
    return io_cost(flops, [grad], [grad_in], grad.dtype)


# ------------------------------------------------------------
# Max/average pooling 1-3d (plain and adaptive), forward and backward.
#
# FLOPs: one compare or add per window element per output (max/avg pool); adaptive pools
# visit each input element about once. NB: avg pool's divide per output is not counted.
# Bytes: input read once, outputs (and int64 indices for the max variants) written once.
# NB: overlapping windows re-read inputs from cache, not from HBM: not counted.

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


# ------------------------------------------------------------
# One-dimensional FFTs: fft_fft, fft_ifft (complex), fft_rfft (real to complex), fft_irfft.
#
# FLOPs: 5*n*log2(n) per complex transform of length n (the radix-2 count), half that for a real
# one; the input read once and the output written once. A real input of fft_fft counts as the
# complex transform it becomes. NB: lengths that are not powers of two cost more (Bluestein).

COMPLEX_OF = {"float16": "complex32", "bfloat16": "complex64", "float32": "complex64", "float64": "complex128"}
REAL_OF = {v: k for k, v in COMPLEX_OF.items() if k != "bfloat16"}


def _complex(dtype: str) -> str:
    return dtype if dtype.startswith("complex") else COMPLEX_OF.get(dtype, "complex64")


@register("fft_fft", "fft_ifft", "fft_rfft", "fft_irfft")
def fft_1d(call: OpCall) -> OpCost:
    # fft_*(self, n, dim=-1, norm): n pads or trims the transformed dim
    x = call.tensor(0)
    if not x.shape:
        raise Unmodelled(f"{call.name}: 0-dim input")
    dim = wrap_dim(call.int_at(2, -1), len(x.shape))
    kind = call.name.removeprefix("aten::fft_")
    default_n = 2 * (x.shape[dim] - 1) if kind == "irfft" else x.shape[dim]
    n = call.int_at(1, None) or default_n
    rows = x.numel // max(x.shape[dim], 1)
    per_transform = 5 * n * math.log2(n) if n > 1 else 0
    if kind in ("rfft", "irfft"):
        per_transform /= 2
    out_len = n // 2 + 1 if kind == "rfft" else n
    out_dtype = REAL_OF.get(x.dtype, "float32") if kind == "irfft" else _complex(x.dtype)
    if not dt.is_dtype_name(out_dtype):
        raise Unmodelled(f"{call.name}: no dtype for the output of {x.dtype}")
    out = written(x.shape[:dim] + (out_len,) + x.shape[dim + 1:], out_dtype)
    return io_cost(rows * per_transform, [x], [out], REAL_OF.get(x.dtype, x.dtype))  # the FMA pipe's dtype
