"""Layer, RMS, group and batch normalisation, forward and backward.

FLOPs per element of the input (NB: per-row/per-channel work such as rsqrt is left out):
- forward with statistics: mean 1 + variance 3 (subtract, square, add) + normalise 2
  (subtract, multiply) = 6, plus 1 for a weight and 1 for a bias (affine);
- RMS norm: square-sum 2 + scale 1, plus 1 for a weight;
- batch norm in eval mode uses the running statistics: normalise 2 + affine;
- backward, grad_input: ~9 (x_hat 2, g*w 1, two row reductions 2, combine 4); RMS: 7;
  eval-mode batch norm: 2. grad_weight: 2 (g*x_hat, accumulate); grad_bias: 1.
Bytes: input, weight, bias and statistics read once, every declared output written once.
Statistics (mean/rstd) are priced as the CUDA kernels write them: fp32 for half inputs
(CPU kernels write them in the input dtype).
NB: two-pass kernels (batch norm training, large rows) read the input twice: not counted.
"""
from __future__ import annotations

import math

from kernel_advisor.analyze.costs import dtypes as dt
from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.registry import OpCost, io_cost, register, written
from kernel_advisor.analyze.costs.shapes import Unmodelled

STATS_FLOPS, RMS_FLOPS, EVAL_FLOPS = 6, 3, 2
GRAD_INPUT_FLOPS, RMS_GRAD_INPUT_FLOPS, EVAL_GRAD_INPUT_FLOPS = 9, 7, 2
GRAD_WEIGHT_FLOPS, GRAD_BIAS_FLOPS = 2, 1


def _affine_flops(weight: Tensor | None, bias: Tensor | None) -> int:
    return (weight is not None) + (bias is not None)


def _rows(call: OpCall, x: Tensor, normalized_pos: int) -> int:
    """Rows of a layer/RMS norm: elements outside the normalised trailing dims."""
    normalized = call.ints_at(normalized_pos)
    if tuple(x.shape[len(x.shape) - len(normalized):]) != tuple(normalized):
        raise Unmodelled(f"{call.name}: {x.shape} does not end in {normalized}")
    return math.prod(x.shape[:len(x.shape) - len(normalized)])


def _stats(rows: int, like: Tensor, count: int) -> list[Tensor]:
    return [written((rows,), dt.accumulate_dtype(like.dtype))] * count


@register("layer_norm", "native_layer_norm")
def layer_norm(call: OpCall) -> OpCost:
    # (input, normalized_shape, weight, bias, eps, ...); native_layer_norm also returns
    # mean and rstd per row (fp32 for half inputs).
    x, w, b = call.tensor(0), call.optional_tensor(2), call.optional_tensor(3)
    rows = _rows(call, x, 1)
    stats = _stats(rows, x, 2) if call.name == "aten::native_layer_norm" else []
    flops = (STATS_FLOPS + _affine_flops(w, b)) * x.numel
    return io_cost(flops, [x, w, b], [written(x.shape, x.dtype), *stats], x.dtype)


@register("native_layer_norm_backward")
def layer_norm_backward(call: OpCall) -> OpCost:
    # (grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)
    go, x = call.tensor(0), call.tensor(1)
    mean, rstd, w, b = (call.optional_tensor(i) for i in (3, 4, 5, 6))
    mask = call.bools_at(7, (True, True, True))
    return norm_backward(go, x, [mean, rstd, w], w or b, mask, GRAD_INPUT_FLOPS)


def norm_backward(go: Tensor, x: Tensor, reads: list, param: Tensor | None, mask: tuple,
                  grad_input_flops: int) -> OpCost:
    """Shared backward: grad_input (mask[0]) plus grad_weight/grad_bias (mask[1], mask[2]),
    which have `param`'s shape (None: the forward had no affine parameters)."""
    want_weight = bool(mask[1]) and param is not None
    want_bias = len(mask) > 2 and bool(mask[2]) and param is not None
    flops = x.numel * (grad_input_flops * bool(mask[0]) + GRAD_WEIGHT_FLOPS * want_weight
                       + GRAD_BIAS_FLOPS * want_bias)
    writes = [written(x.shape, x.dtype) if mask[0] else None,
              param if want_weight else None, param if want_bias else None]
    return io_cost(flops, [go, x, *reads], writes, x.dtype)


@register("rms_norm", "_fused_rms_norm")
def rms_norm(call: OpCall) -> OpCost:
    # (input, normalized_shape, weight, eps); _fused_rms_norm also returns rstd per row.
    x, w = call.tensor(0), call.optional_tensor(2)
    rows = _rows(call, x, 1)
    stats = _stats(rows, x, 1) if call.name == "aten::_fused_rms_norm" else []
    flops = (RMS_FLOPS + (w is not None)) * x.numel
    return io_cost(flops, [x, w], [written(x.shape, x.dtype), *stats], x.dtype)


@register("_fused_rms_norm_backward")
def rms_norm_backward(call: OpCall) -> OpCost:
    # (grad_out, input, normalized_shape, rstd, weight, output_mask[2])
    go, x, rstd, w = call.tensor(0), call.tensor(1), call.optional_tensor(3), \
        call.optional_tensor(4)
    mask = call.bools_at(5, (True, True))
    return norm_backward(go, x, [rstd, w], w, mask, RMS_GRAD_INPUT_FLOPS)


@register("group_norm")
def group_norm(call: OpCall) -> OpCost:
    # group_norm(input, num_groups, weight, bias, eps, cudnn_enabled) -> output
    x, w, b = call.tensor(0), call.optional_tensor(2), call.optional_tensor(3)
    flops = (STATS_FLOPS + _affine_flops(w, b)) * x.numel
    return io_cost(flops, [x, w, b], [written(x.shape, x.dtype)], x.dtype)


@register("native_group_norm")
def native_group_norm(call: OpCall) -> OpCost:
    # (input, weight, bias, N, C, HxW, group, eps) -> output, mean [N, G], rstd [N, G]
    x, w, b = call.tensor(0), call.optional_tensor(1), call.optional_tensor(2)
    n, groups = call.int_at(3), call.int_at(6)
    flops = (STATS_FLOPS + _affine_flops(w, b)) * x.numel
    stats = _stats(n * groups, x, 2)
    return io_cost(flops, [x, w, b], [written(x.shape, x.dtype), *stats], x.dtype)


@register("native_group_norm_backward")
def group_norm_backward(call: OpCall) -> OpCost:
    # (grad_out, input, mean, rstd, weight, N, C, HxW, group, output_mask)
    go, x, mean, rstd = (call.tensor(i) for i in range(4))
    w = call.optional_tensor(4)
    channels = call.int_at(6)
    mask = call.bools_at(9, (True, True, True))
    param = written((channels,), w.dtype if w else x.dtype)
    return norm_backward(go, x, [mean, rstd, w], param, mask, GRAD_INPUT_FLOPS)


# ------------------------------------------------------------
# softmax / log_softmax, their ATen kernels and backward ops.
#
# NB: ~5 flops per element forward (max, subtract, exp, sum, divide; log_softmax: log and
# subtract instead of divide), 4 backward (softmax: dot(grad, y) 2, subtract, multiply;
# log_softmax: exp, multiply-sum, subtract). Bytes read the input once and write the output
# once; the usual kernels make two or three passes over the row, which stay in cache only while
# a row fits on chip.

FORWARD_FLOPS_PER_ELEMENT = 5.0
BACKWARD_FLOPS_PER_ELEMENT = 4.0


def _forward(call: OpCall, out_dtype: str) -> OpCost:
    x = call.tensor(0)
    return io_cost(FORWARD_FLOPS_PER_ELEMENT * x.numel, [x], [written(x.shape, out_dtype)],
                   out_dtype)


@register("softmax", "log_softmax", "_safe_softmax")
def softmax(call: OpCall) -> OpCost:
    # softmax(self, dim, dtype=None): dtype casts the input before the computation.
    x = call.tensor(0)
    return _forward(call, call.dtype_code_at(2) or x.dtype)


@register("_softmax", "_log_softmax")
def aten_softmax(call: OpCall) -> OpCost:
    # _softmax(self, dim, half_to_float): half/bf16 in, fp32 out when half_to_float.
    x = call.tensor(0)
    upcast = call.bool_at(2, False) and x.dtype in ("float16", "bfloat16")
    return _forward(call, "float32" if upcast else x.dtype)


@register("_softmax_backward_data", "_log_softmax_backward_data")
def softmax_backward(call: OpCall) -> OpCost:
    # (grad_output, output, dim, input_dtype): grad_input has the forward input's dtype.
    grad, y = call.tensor(0), call.tensor(1)
    out_dtype = call.dtype_code_at(3) or grad.dtype
    return io_cost(BACKWARD_FLOPS_PER_ELEMENT * grad.numel, [grad, y],
                   [written(grad.shape, out_dtype)], grad.dtype)


# ------------------------------------------------------------
# Batch and instance normalisation, forward and backward (conventions in norms.py).
#
# In training mode the running statistics are read and written back (momentum update) and
# the per-channel batch statistics are written for backward; in eval mode only the running
# statistics are read and the op is a fused per-channel scale and shift (2 flops/element).

def _channels(call: OpCall, x: Tensor) -> int:
    if len(x.shape) < 2:
        raise Unmodelled(f"{call.name}: batch norm needs [N, C, ...] input, got {x.shape}")
    return x.shape[1]


def batch_norm_cost(call: OpCall, positions: tuple, training: bool, saves_stats: bool,
                    stat_groups: int = 1) -> OpCost:
    """positions: (input, weight, bias, running_mean, running_var), None when absent."""
    x = call.tensor(positions[0])
    w, b, rm, rv = (call.optional_tensor(p) if p is not None else None for p in positions[1:])
    stats_len = _channels(call, x) * stat_groups
    affine = (w is not None) + (b is not None)
    if training:
        flops = (STATS_FLOPS + affine) * x.numel
        saved = [written((stats_len,), dt.accumulate_dtype(x.dtype))] * 2 if saves_stats else []
        writes = [written(x.shape, x.dtype), rm, rv, *saved]  # running stats updated in place
    else:
        flops = EVAL_FLOPS * x.numel
        writes = [written(x.shape, x.dtype)]
    return io_cost(flops, [x, w, b, rm, rv], writes, x.dtype)


FIVE = (0, 1, 2, 3, 4)


@register("batch_norm")
def batch_norm(call: OpCall) -> OpCost:
    # (input, weight, bias, running_mean, running_var, training, momentum, eps, cudnn_enabled)
    return batch_norm_cost(call, FIVE, call.bool_at(5), saves_stats=False)


@register("native_batch_norm", "_batch_norm_impl_index", "cudnn_batch_norm", "miopen_batch_norm")
def native_batch_norm(call: OpCall) -> OpCost:
    # (input, weight, bias, running_mean, running_var, training, momentum|factor, eps)
    return batch_norm_cost(call, FIVE, call.bool_at(5), saves_stats=True)


@register("_native_batch_norm_legit")
def native_batch_norm_legit(call: OpCall) -> OpCost:
    # (input, weight, bias, running_mean, running_var, training, momentum, eps), or the
    # no_stats overload (input, weight, bias, training, momentum, eps).
    if call.has_tensor(3):
        return batch_norm_cost(call, FIVE, call.bool_at(5), saves_stats=True)
    return batch_norm_cost(call, (0, 1, 2, None, None), call.bool_at(3), saves_stats=True)


@register("_native_batch_norm_legit_no_training", "_batch_norm_no_update")
def batch_norm_eval(call: OpCall) -> OpCost:
    return batch_norm_cost(call, FIVE, training=False, saves_stats=False)


@register("_batch_norm_with_update")
def batch_norm_with_update(call: OpCall) -> OpCost:
    return batch_norm_cost(call, FIVE, training=True, saves_stats=True)


@register("instance_norm")
def instance_norm(call: OpCall) -> OpCost:
    # (input, weight, bias, running_mean, running_var, use_input_stats, momentum, eps, cudnn):
    # statistics per (sample, channel).
    x = call.tensor(0)
    if call.bool_at(5):
        _channels(call, x)  # [N, C, ...]
        return batch_norm_cost(call, FIVE, True, saves_stats=False, stat_groups=x.shape[0])
    return batch_norm_cost(call, FIVE, False, saves_stats=False)


def _backward(call: OpCall, go_pos: int, x_pos: int, rest: tuple, train: bool,
              mask: tuple) -> OpCost:
    """rest: positions of (weight, running_mean, running_var, save_mean, save_var)."""
    go, x = call.tensor(go_pos), call.tensor(x_pos)
    w, rm, rv, save_mean, save_var = (call.optional_tensor(p) for p in rest)
    stats = [save_mean, save_var] if train else [rm, rv]
    param = written((_channels(call, x),), w.dtype if w else x.dtype)
    flops = GRAD_INPUT_FLOPS if train else EVAL_GRAD_INPUT_FLOPS
    return norm_backward(go, x, [*stats, w], param, mask, flops)


ALL_GRADS = (True, True, True)


@register("native_batch_norm_backward")
def native_batch_norm_backward(call: OpCall) -> OpCost:
    # (grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps,
    #  output_mask)
    return _backward(call, 0, 1, (2, 3, 4, 5, 6), call.bool_at(7), call.bools_at(9, ALL_GRADS))


@register("batch_norm_backward")
def batch_norm_backward(call: OpCall) -> OpCost:
    # (grad_out, input, weight, running_mean, running_var, save_mean, save_var, update, eps,
    #  output_mask, reserve)
    return _backward(call, 0, 1, (2, 3, 4, 5, 6), call.bool_at(7), call.bools_at(9, ALL_GRADS))


@register("cudnn_batch_norm_backward", "miopen_batch_norm_backward")
def cudnn_batch_norm_backward(call: OpCall) -> OpCost:
    # (input, grad_output, weight, running_mean, running_var, save_mean, save_var, eps, ...)
    return _backward(call, 1, 0, (2, 3, 4, 5, 6), True, ALL_GRADS)


@register("_batch_norm_impl_index_backward")
def batch_norm_impl_index_backward(call: OpCall) -> OpCost:
    # (impl_index, input, grad_output, weight, running_mean, running_var, save_mean,
    #  save_var_transform, train, eps, output_mask, reservedSpace)
    return _backward(call, 2, 1, (3, 4, 5, 6, 7), call.bool_at(8), call.bools_at(10, ALL_GRADS))
