"""Similarities and products of two operands: cosine_similarity, pairwise_distance, cdist,
bilinear, outer, kron, linalg_cross.

FLOPs per element pair along the reduced dim: cosine_similarity 6 (the dot product and the two
squared norms, a multiply and an add each); pairwise_distance 3 (subtract, |d|^p, add); cdist
with p = 2 is a GEMM, 2*P*R*M, plus the two squared norms (2 per input element), other p
3*P*R*M. bilinear: 2*N*O*I1*I2 (x1^T W_o x2 per output) plus the bias. outer and kron: one
multiply per output element; linalg_cross 3 per output element (two multiplies, a subtract).
_trilinear (bilinear's building block, forward and backward): 2 flops per element of the
broadcast product of its three expanded operands, summed over `sumdim` into the output. Per-output work (sqrt, divide, eps clamps) is left out.
Bytes: inputs read once, the output written once.
"""
from __future__ import annotations

import math

from kernel_advisor.analyze.costs.call import OpCall
from kernel_advisor.analyze.costs.common import io_cost, written
from kernel_advisor.analyze.costs.registry import OpCost, register
from kernel_advisor.analyze.costs.shapes import Unmodelled, broadcast, reduced, wrap_dim

COSINE_FLOPS_PER_PAIR = 6
DISTANCE_FLOPS_PER_PAIR = 3


@register("cosine_similarity")
def cosine_similarity(call: OpCall) -> OpCost:
    # cosine_similarity(x1, x2, dim=1, eps): the broadcast pair reduced along dim
    x1, x2 = call.tensor(0), call.tensor(1)
    shape = broadcast(x1.shape, x2.shape)
    dim = wrap_dim(call.int_at(2, 1), len(shape))
    out = written(reduced(shape, (dim,), False), x1.dtype)
    return io_cost(COSINE_FLOPS_PER_PAIR * math.prod(shape), [x1, x2], [out], x1.dtype)


@register("pairwise_distance")
def pairwise_distance(call: OpCall) -> OpCost:
    # pairwise_distance(x1, x2, p, eps, keepdim): the norm of x1 - x2 (+ eps) over the last dim
    x1, x2 = call.tensor(0), call.tensor(1)
    shape = broadcast(x1.shape, x2.shape)
    if not shape:
        raise Unmodelled(f"{call.name}: 0-dim inputs")
    out = written(reduced(shape, (len(shape) - 1,), call.bool_at(4, False)), x1.dtype)
    return io_cost(DISTANCE_FLOPS_PER_PAIR * math.prod(shape), [x1, x2], [out], x1.dtype)


@register("cdist", "_cdist_forward")
def cdist(call: OpCall) -> OpCost:
    # cdist(x1 [*, P, M], x2 [*, R, M], p, compute_mode) -> [*, P, R]
    x1, x2 = call.tensor(0), call.tensor(1)
    if len(x1.shape) < 2 or len(x2.shape) < 2 or x1.shape[-1] != x2.shape[-1]:
        raise Unmodelled(f"{call.name}: {x1.shape} and {x2.shape} do not pair")
    batch = broadcast(x1.shape[:-2], x2.shape[:-2])
    (p_rows, m), r_rows = x1.shape[-2:], x2.shape[-2]
    pairs = math.prod(batch) * p_rows * r_rows * m
    euclid = call.float_at(2, 2.0) == 2.0
    # NB: the p = 2 GEMM path (torch's choice past 25 rows) and the direct path cost alike here
    flops = 2 * pairs + 2 * (x1.numel + x2.numel) if euclid else DISTANCE_FLOPS_PER_PAIR * pairs
    out = written(batch + (p_rows, r_rows), x1.dtype)
    return io_cost(flops, [x1, x2], [out], x1.dtype, tensor_cores=euclid)


@register("bilinear")
def bilinear(call: OpCall) -> OpCost:
    # bilinear(x1 [*, I1], x2 [*, I2], weight [O, I1, I2], bias [O]) -> [*, O]
    x1, x2, w, b = call.tensor(0), call.tensor(1), call.tensor(2), call.optional_tensor(3)
    if len(w.shape) != 3 or not x1.shape or x1.shape[-1] != w.shape[1] or x2.shape[-1:] != w.shape[2:]:
        raise Unmodelled(f"{call.name}: {x1.shape}, {x2.shape} do not fit weight {w.shape}")
    rows = math.prod(broadcast(x1.shape[:-1], x2.shape[:-1]))
    out = written(broadcast(x1.shape[:-1], x2.shape[:-1]) + (w.shape[0],), x1.dtype)
    flops = 2 * rows * w.numel + (out.numel if b is not None else 0)
    return io_cost(flops, [x1, x2, w, b], [out], x1.dtype, tensor_cores=True)


@register("outer", "ger")
def outer(call: OpCall) -> OpCost:
    a, b = call.tensor(0), call.tensor(1)
    out = written((a.numel, b.numel), a.dtype)
    return io_cost(out.numel, [a, b], [out], a.dtype)


@register("kron")
def kron(call: OpCall) -> OpCost:
    # kron(a, b): each output element a[i] * b[j]; dims pair from the right
    a, b = call.tensor(0), call.tensor(1)
    rank = max(len(a.shape), len(b.shape))
    sa, sb = (1,) * (rank - len(a.shape)) + a.shape, (1,) * (rank - len(b.shape)) + b.shape
    out = written(tuple(x * y for x, y in zip(sa, sb)), a.dtype)
    return io_cost(out.numel, [a, b], [out], a.dtype)


@register("linalg_cross", "cross")
def cross(call: OpCall) -> OpCost:
    # linalg_cross(self, other, dim=-1): 3-vectors along dim, broadcast
    a, b = call.tensor(0), call.tensor(1)
    out = written(broadcast(a.shape, b.shape), a.dtype)
    return io_cost(3 * out.numel, [a, b], [out], a.dtype)


@register("_trilinear")
def trilinear(call: OpCall) -> OpCost:
    # _trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim): each operand gets
    # size-1 dims at its expand positions; their broadcast product is summed over sumdim.
    operands = [call.tensor(i) for i in range(3)]
    full_rank = len(operands[0].shape) + len(call.ints_at(3))
    shapes = []
    for t, expand in zip(operands, (call.ints_at(3), call.ints_at(4), call.ints_at(5))):
        shape = list(t.shape)
        for d in sorted(expand):
            shape.insert(d, 1)
        if len(shape) != full_rank:
            raise Unmodelled(f"{call.name}: operand {t.shape} expands to rank {len(shape)}, not {full_rank}")
        shapes.append(shape)
    full = broadcast(*shapes)
    out = written(reduced(full, tuple(call.ints_at(6)), False) if call.ints_at(6) else full, operands[0].dtype)
    return io_cost(2 * math.prod(full), operands, [out], operands[0].dtype, tensor_cores=True)  # bmm inside
