"""Reductions (sum, mean, amax, max, var, norm, argmax, ...) and scans (cumsum, cumprod).

FLOPs per input element: 1 for sum/mean/prod/amax/amin/max/min/argmax/all/any (one add or
compare), 2 for norms (|x|^p and add; NB: p other than 1, 2, inf costs a pow more),
4 for var/std (mean pass 1, subtract, square, add; NB: Welford does the same in one pass),
4 for logsumexp (max, subtract, exp, add). Per-output work (divide by n, sqrt) is left out.
Bytes: the input read once and the (much smaller) output written once.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from kernel_advisor.analyze.costs import dtypes as dt
from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.pointwise import Pointwise, pointwise_cost
from kernel_advisor.analyze.costs.registry import OpCost, io_cost, register, written
from kernel_advisor.analyze.costs.shapes import Unmodelled, reduced, wrap_dim


@dataclass(frozen=True)
class Reduction:
    dims: tuple[int, ...] | None  # None or empty: all dims
    keepdim: bool
    out_dtype: str
    flops_per_element: float
    with_indices: bool = False  # max.dim/min.dim also return int64 indices


def reduction_cost(x: Tensor, r: Reduction) -> OpCost:
    out_shape = reduced(x.shape, r.dims, r.keepdim)
    outs = [written(out_shape, r.out_dtype)]
    if r.with_indices:
        outs.append(written(out_shape, "int64"))
    compute = x.dtype if dt.is_floating(x.dtype) else r.out_dtype
    return io_cost(r.flops_per_element * x.numel, [x], outs, compute)


def _sum_dtype(x: Tensor, requested: str | None) -> str:
    # Integer and bool sums accumulate into int64 unless a dtype is requested.
    if requested:
        return requested
    return "int64" if dt.category(x.dtype) < 2 else x.dtype


def _dims(call: OpCall, pos: int) -> tuple[int, ...] | None:
    return call.ints_at(pos, None)


@register("sum", "nansum", "mean", "prod")
def sum_like(call: OpCall) -> OpCost:
    # sum(self, dtype) | sum.dim_IntList(self, dim, keepdim, dtype[, out]); the same for mean,
    # nansum; prod.dim_int(self, dim, keepdim, dtype).
    x = call.tensor(0)
    if call.arg_count() <= 2:
        dims, keepdim, requested = None, False, call.dtype_code_at(1)
    else:
        dims, keepdim, requested = _dims(call, 1), call.bool_at(2, False), call.dtype_code_at(3)
    is_mean = call.name == "aten::mean"
    out_dtype = (requested or x.dtype) if is_mean else _sum_dtype(x, requested)
    return reduction_cost(x, Reduction(dims, keepdim, out_dtype, 1.0))


@register("amax", "amin")
def amax(call: OpCall) -> OpCost:
    # amax(self, dim=[], keepdim=False)
    x = call.tensor(0)
    return reduction_cost(x, Reduction(_dims(call, 1), call.bool_at(2, False), x.dtype, 1.0))


@register("max", "min")
def max_min(call: OpCall) -> OpCost:
    # max(self) | max.other(self, other) (elementwise) | max.dim(self, dim, keepdim)
    x = call.tensor(0)
    if call.has_tensor(1):
        return pointwise_cost(call, Pointwise((0, 1)), inplace=False)
    if call.arg_count() == 1:
        return reduction_cost(x, Reduction(None, False, x.dtype, 1.0))
    dim = call.int_at(1)
    return reduction_cost(x, Reduction((dim,), call.bool_at(2, False), x.dtype, 1.0,
                                       with_indices=True))


@register("argmax", "argmin")
def argmax(call: OpCall) -> OpCost:
    # argmax(self, dim=None, keepdim=False): int64 indices.
    x = call.tensor(0)
    dim = call.int_at(1, None)
    dims = None if dim is None else (dim,)
    return reduction_cost(x, Reduction(dims, call.bool_at(2, False), "int64", 1.0))


@register("all", "any")
def all_any(call: OpCall) -> OpCost:
    # all(self) | all.dim(self, dim, keepdim) | all.dims(self, dim=None, keepdim): bool out.
    x = call.tensor(0)
    dims = _dims(call, 1) if call.arg_count() > 1 else None
    keepdim = call.bool_at(2, False) if call.arg_count() > 2 else False
    out = "uint8" if x.dtype == "uint8" else "bool"
    return reduction_cost(x, Reduction(dims, keepdim, out, 1.0))


VARIANCE_FLOPS = 4.0


def _variance(call: OpCall, outputs: int) -> OpCost:
    # var(self, unbiased) | var.dim(self, dim, unbiased, keepdim) |
    # var.correction(self, dim, correction, keepdim); var_mean/std_mean return two outputs.
    x = call.tensor(0)
    if call.arg_count() <= 2:
        dims, keepdim = None, False
    else:
        dims, keepdim = _dims(call, 1), call.bool_at(3, False)
    out_shape = reduced(x.shape, dims, keepdim)
    return io_cost(VARIANCE_FLOPS * x.numel, [x], [written(out_shape, x.dtype)] * outputs,
                   x.dtype)


@register("var", "std")
def var(call: OpCall) -> OpCost:
    return _variance(call, outputs=1)


@register("var_mean", "std_mean")
def var_mean(call: OpCall) -> OpCost:
    return _variance(call, outputs=2)


NORM_FLOPS = 2.0


@register("norm")
def norm(call: OpCall) -> OpCost:
    # norm.Scalar(self, p) | norm.ScalarOpt_dtype(self, p, dtype) |
    # norm.ScalarOpt_dim(self, p, dim, keepdim) | norm.ScalarOpt_dim_dtype(..., dtype)
    x = call.tensor(0)
    if call.arg_count() <= 3:
        dims, keepdim = None, False
        requested = call.dtype_code_at(2) if call.arg_count() == 3 else None
    else:
        dims, keepdim = _dims(call, 2), call.bool_at(3, False)
        requested = call.dtype_code_at(4) if call.arg_count() > 4 else None
    return reduction_cost(x, Reduction(dims, keepdim, requested or x.dtype, NORM_FLOPS))


@register("linalg_vector_norm", "linalg_norm")
def vector_norm(call: OpCall) -> OpCost:
    # linalg_vector_norm(self, ord, dim, keepdim, dtype); linalg_norm takes the same arguments.
    # NB: linalg_norm's matrix norms other than Frobenius (ord 2, nuc) run an SVD; counted as
    # the vector norm they reduce to for the default and "fro".
    x = call.tensor(0)
    r = Reduction(_dims(call, 2), call.bool_at(3, False), call.dtype_code_at(4) or x.dtype,
                  NORM_FLOPS)
    return reduction_cost(x, r)


@register("logsumexp")
def logsumexp(call: OpCall) -> OpCost:
    # logsumexp(self, dim, keepdim)
    x = call.tensor(0)
    out = x.dtype if dt.is_floating(x.dtype) else "float32"
    return reduction_cost(x, Reduction(_dims(call, 1), call.bool_at(2, False), out, 4.0))


@register("cumsum", "cumprod")
def scan(call: OpCall) -> OpCost:
    # cumsum(self, dim, dtype): the output has the input's shape; 1 flop per element.
    x = call.tensor(0)
    out_dtype = _sum_dtype(x, call.dtype_code_at(2))
    return io_cost(x.numel, [x], [written(x.shape, out_dtype)], x.dtype)


@register("count_nonzero")
def count_nonzero(call: OpCall) -> OpCost:
    # count_nonzero(self, dim) -> int64: one compare and add per element.
    x = call.tensor(0)
    return reduction_cost(x, Reduction(_dims(call, 1), False, "int64", 1.0))


@register("cumprod_backward")
def cumprod_backward(call: OpCall) -> OpCost:
    # cumprod_backward(grad, input, dim, output): a reversed scan of grad * output, divided by
    # input (4 flops an element); grad, input and output read, the input-shaped gradient written.
    grad, x, out = call.tensor(0), call.tensor(1), call.tensor(3)
    return io_cost(4 * x.numel, [grad, x, out], [written(x.shape, x.dtype)], x.dtype)


# ------------------------------------------------------------
# Selection and ordering along a dim: topk, sort, kthvalue, median, mode; running max/min
# (cummax, cummin) and logcumsumexp.
#
# FLOPs: topk, kthvalue, median, mode 1 compare per input element (a radix select reads each
# element a few times; NB: counted once); sort n*log2(n) compares per sorted row of n; cummax and
# cummin 1 per element; logcumsumexp 3 (exp, add, log). Bytes: the input read once, values and
# int64 indices written once.

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
