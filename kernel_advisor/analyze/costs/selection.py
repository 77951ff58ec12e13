"""Selection and ordering along a dim: topk, sort, kthvalue, median, mode; running max/min
(cummax, cummin) and logcumsumexp.

FLOPs: topk, kthvalue, median, mode 1 compare per input element (a radix select reads each
element a few times; NB: counted once); sort n*log2(n) compares per sorted row of n; cummax and
cummin 1 per element; logcumsumexp 3 (exp, add, log). Bytes: the input read once, values and
int64 indices written once.
"""
from __future__ import annotations

import math

from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.common import io_cost, written
from kernel_advisor.analyze.costs.errors import Unmodelled
from kernel_advisor.analyze.costs.registry import OpCost, register
from kernel_advisor.analyze.costs.shapes import reduced, wrap_dim

LOGCUMSUMEXP_FLOPS = 3


def _dim(call: OpCall, x: Tensor, pos: int, default: int = -1) -> int:
    return wrap_dim(call.int_at(pos, default), len(x.shape))


def _values_and_indices(x: Tensor, shape: tuple) -> list[Tensor]:
    return [written(shape, x.dtype), written(shape, "int64")]


@register("topk")
def topk(call: OpCall) -> OpCost:
    # topk(self, k, dim=-1, largest, sorted) -> values, indices with k along dim
    x = call.tensor(0)
    k, dim = call.int_at(1), _dim(call, x, 2)
    if x.shape and not 0 <= k <= x.shape[dim]:
        raise Unmodelled(f"{call.name}: k={k} out of range for {x.shape}")
    shape = x.shape[:dim] + (k,) + x.shape[dim + 1:] if x.shape else ()
    return io_cost(x.numel, [x], _values_and_indices(x, shape), x.dtype)


@register("sort")
def sort(call: OpCall) -> OpCost:
    # sort(self, dim=-1, descending) | sort.stable(self, stable, dim, descending)
    x = call.tensor(0)
    dim = _dim(call, x, 2 if call.arg_count() >= 4 else 1)
    n = x.shape[dim] if x.shape else 1
    flops = x.numel * math.log2(n) if n > 1 else 0
    return io_cost(flops, [x], _values_and_indices(x, x.shape), x.dtype)


@register("kthvalue", "median", "nanmedian", "mode")
def select_along(call: OpCall) -> OpCost:
    # kthvalue(self, k, dim, keepdim) | median.dim(self, dim, keepdim) | median(self) -> value
    x = call.tensor(0)
    if call.name == "aten::kthvalue":
        dim, keepdim = _dim(call, x, 2), call.bool_at(3, False)
    elif call.arg_count() == 1:
        return io_cost(x.numel, [x], [written((), x.dtype)], x.dtype)
    else:
        dim, keepdim = _dim(call, x, 1), call.bool_at(2, False)
    return io_cost(x.numel, [x], _values_and_indices(x, reduced(x.shape, (dim,), keepdim)), x.dtype)


@register("cummax", "cummin")
def running_extreme(call: OpCall) -> OpCost:
    x = call.tensor(0)
    return io_cost(x.numel, [x], _values_and_indices(x, x.shape), x.dtype)


@register("logcumsumexp")
def logcumsumexp(call: OpCall) -> OpCost:
    x = call.tensor(0)
    return io_cost(LOGCUMSUMEXP_FLOPS * x.numel, [x], [written(x.shape, x.dtype)], x.dtype)
