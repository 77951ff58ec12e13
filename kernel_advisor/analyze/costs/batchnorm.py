"""Batch and instance normalisation, forward and backward (conventions in norms.py).

In training mode the running statistics are read and written back (momentum update) and
the per-channel batch statistics are written for backward; in eval mode only the running
statistics are read and the op is a fused per-channel scale and shift (2 flops/element).
"""
from __future__ import annotations

from kernel_advisor.analyze.costs import dtypes as dt
from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.common import io_cost, written
from kernel_advisor.analyze.costs.norms import (EVAL_FLOPS, EVAL_GRAD_INPUT_FLOPS, GRAD_INPUT_FLOPS, STATS_FLOPS,
                                                norm_backward)
from kernel_advisor.analyze.costs.registry import OpCost, register
from kernel_advisor.analyze.costs.shapes import Unmodelled


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
