"""Matrix products: mm, addmm, bmm, baddbmm, addbmm, mv, addmv, dot, matmul, linear, _scaled_mm.

FLOPs come from torch.utils.flop_counter (2*M*N*K, the convention FlopCounterMode uses).
NB: the bias/accumulator add of addmm-like ops (M*N flops, plus alpha/beta scaling) is left
out, as FlopCounterMode does: it is 1/K of the product, under 1% for K >= 128.
NB: bytes assume each operand is read from HBM once; tiled kernels re-read A and B through L2
(N/tile_n and M/tile_m times), which L2 mostly absorbs, and split-K workspaces are ignored.
"""
from __future__ import annotations

import math

from torch.utils import flop_counter

from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.registry import OpCost, io_cost, register, written
from kernel_advisor.analyze.costs.shapes import Unmodelled, broadcast, reduced, wrap_dim


def _mm_flops(m: int, k: int, n: int) -> int:
    return flop_counter.mm_flop((m, k), (k, n))


def _bmm_flops(b: int, m: int, k: int, n: int) -> int:
    return flop_counter.bmm_flop((b, m, k), (b, k, n))


def _require(condition: bool, call: OpCall, what: str) -> None:
    if not condition:
        raise Unmodelled(f"{call.name}: {what}")


def _out_dtype(call: OpCall, pos: int, default: str, dtype_overload_args: int) -> str:
    """The result dtype: an out= tensor's (anywhere from `pos` on), the out_dtype ScalarType
    at `pos` of the `.dtype` overload (recognised by its argument count), or the operands'."""
    for i in range(pos, call.arg_count()):
        if call.has_tensor(i):
            return call.tensor(i).dtype
    if call.arg_count() == dtype_overload_args and call.is_scalar(pos):
        return call.dtype_code_at(pos) or default
    return default


def _product(flops: int, reads: list[Tensor | None], out_shape: tuple,
             out_dtype: str) -> OpCost:
    # reads[0] is always the A operand: its dtype picks the tensor-core path.
    return io_cost(flops, reads, [written(out_shape, out_dtype)], reads[0].dtype,
                   tensor_cores=True)


def _matrix_pair(call: OpCall, a_pos: int, b_pos: int) -> tuple[Tensor, Tensor, int, int, int]:
    a, b = call.tensor(a_pos), call.tensor(b_pos)
    _require(len(a.shape) == 2 and len(b.shape) == 2, call, "operands must be 2-D")
    (m, k), (k2, n) = a.shape, b.shape
    _require(k == k2, call, f"inner dims differ: {a.shape} @ {b.shape}")
    return a, b, m, k, n


@register("mm")
def mm(call: OpCall) -> OpCost:
    # mm(self, mat2) | mm.dtype(self, mat2, out_dtype) | mm.out(self, mat2, out)
    a, b, m, k, n = _matrix_pair(call, 0, 1)
    return _product(_mm_flops(m, k, n), [a, b], (m, n), _out_dtype(call, 2, a.dtype, 3))


@register("addmm", "_addmm_activation")
def addmm(call: OpCall) -> OpCost:
    # addmm(self, mat1, mat2, [out_dtype], beta, alpha): self is the bias, read at its real size.
    # NB: _addmm_activation's fused relu/gelu epilogue (M*N flops) is not counted either.
    bias = call.tensor(0)
    a, b, m, k, n = _matrix_pair(call, 1, 2)
    broadcast(bias.shape, (m, n))
    out_dtype = _out_dtype(call, 3, a.dtype, 6)
    return _product(_mm_flops(m, k, n), [a, b, bias], (m, n), out_dtype)


def _batched_pair(call: OpCall, a_pos: int, b_pos: int) -> tuple[Tensor, Tensor, tuple]:
    a, b = call.tensor(a_pos), call.tensor(b_pos)
    _require(len(a.shape) == 3 and len(b.shape) == 3, call, "operands must be 3-D")
    _require(a.shape[0] == b.shape[0] and a.shape[2] == b.shape[1], call,
             f"shapes do not multiply: {a.shape} @ {b.shape}")
    return a, b, (a.shape[0], a.shape[1], a.shape[2], b.shape[2])


@register("bmm")
def bmm(call: OpCall) -> OpCost:
    a, b, (batch, m, k, n) = _batched_pair(call, 0, 1)
    return _product(_bmm_flops(batch, m, k, n), [a, b], (batch, m, n),
                    _out_dtype(call, 2, a.dtype, 3))


@register("baddbmm")
def baddbmm(call: OpCall) -> OpCost:
    acc = call.tensor(0)
    a, b, (batch, m, k, n) = _batched_pair(call, 1, 2)
    broadcast(acc.shape, (batch, m, n))
    return _product(_bmm_flops(batch, m, k, n), [a, b, acc], (batch, m, n),
                    _out_dtype(call, 3, a.dtype, 6))


@register("addbmm")
def addbmm(call: OpCall) -> OpCost:
    # addbmm sums the batch of products into one [M, N] matrix.
    acc = call.tensor(0)
    a, b, (batch, m, k, n) = _batched_pair(call, 1, 2)
    return _product(_bmm_flops(batch, m, k, n), [a, b, acc], (m, n), a.dtype)


@register("mv")
def mv(call: OpCall) -> OpCost:
    a, v = call.tensor(0), call.tensor(1)
    _require(len(a.shape) == 2 and v.shape == (a.shape[1],), call, "shapes do not multiply")
    return _product(_mm_flops(a.shape[0], a.shape[1], 1), [a, v], (a.shape[0],), a.dtype)


@register("addmv")
def addmv(call: OpCall) -> OpCost:
    acc, a, v = call.tensor(0), call.tensor(1), call.tensor(2)
    _require(len(a.shape) == 2 and v.shape == (a.shape[1],), call, "shapes do not multiply")
    return _product(_mm_flops(a.shape[0], a.shape[1], 1), [a, v, acc], (a.shape[0],),
                    a.dtype)


@register("dot", "vdot")
def dot(call: OpCall) -> OpCost:
    a, b = call.tensor(0), call.tensor(1)
    _require(len(a.shape) == 1 and a.shape == b.shape, call, "operands must be equal 1-D")
    return _product(_mm_flops(1, a.shape[0], 1), [a, b], (), a.dtype)


def matmul_shapes(a_shape: tuple, b_shape: tuple) -> tuple[int, int, int, int, tuple]:
    """torch.matmul semantics: (batch, M, K, N, output shape), 1-D operands promoted and
    batch dims broadcast."""
    if not a_shape or not b_shape:
        raise Unmodelled("matmul of a 0-dim tensor")
    a2 = (1,) + a_shape if len(a_shape) == 1 else a_shape
    b2 = b_shape + (1,) if len(b_shape) == 1 else b_shape
    (m, k), (k2, n) = a2[-2:], b2[-2:]
    if k != k2:
        raise Unmodelled(f"matmul inner dims differ: {a_shape} @ {b_shape}")
    batch = broadcast(a2[:-2], b2[:-2])
    out = batch + ((m,) if len(a_shape) > 1 else ()) + ((n,) if len(b_shape) > 1 else ())
    return math.prod(batch), m, k, n, out


@register("matmul")
def matmul(call: OpCall) -> OpCost:
    # NB: a broadcast operand is counted once at its real size, as if the kernel re-read it
    # from L2; torch actually expands it into a bmm (and may materialise the copy).
    a, b = call.tensor(0), call.tensor(1)
    batch, m, k, n, out = matmul_shapes(a.shape, b.shape)
    return _product(_bmm_flops(batch, m, k, n), [a, b], out, a.dtype)


@register("linear")
def linear(call: OpCall) -> OpCost:
    # linear(input [..., K], weight [N, K], bias [N]?) = input @ weight.T + bias
    x, w, bias = call.tensor(0), call.tensor(1), call.optional_tensor(2)
    _require(len(w.shape) in (1, 2) and x.shape and x.shape[-1] == w.shape[-1], call,
             f"shapes do not multiply: {x.shape} @ {w.shape}.T")
    n = w.shape[0] if len(w.shape) == 2 else 1
    rows = math.prod(x.shape[:-1])
    out = x.shape[:-1] + ((n,) if len(w.shape) == 2 else ())
    return _product(_mm_flops(rows, x.shape[-1], n), [x, w, bias], out, x.dtype)


@register("_scaled_mm")
def scaled_mm(call: OpCall) -> OpCost:
    # _scaled_mm(self, mat2, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum):
    # fp8 operands; the compute dtype is the operand dtype (fp8 tensor-core path).
    a, b, m, k, n = _matrix_pair(call, 0, 1)
    extras = [call.optional_tensor(i) for i in (2, 3, 4, 5)]
    out_dtype = call.dtype_code_at(6) if call.is_scalar(6) else None
    return _product(_mm_flops(m, k, n), [a, b, *extras], (m, n), out_dtype or a.dtype)


# ------------------------------------------------------------
# Similarities and products of two operands: cosine_similarity, pairwise_distance, cdist,
# bilinear, outer, kron, linalg_cross.
#
# FLOPs per element pair along the reduced dim: cosine_similarity 6 (the dot product and the two
# squared norms, a multiply and an add each); pairwise_distance 3 (subtract, |d|^p, add); cdist
# with p = 2 is a GEMM, 2*P*R*M, plus the two squared norms (2 per input element), other p
# 3*P*R*M. bilinear: 2*N*O*I1*I2 (x1^T W_o x2 per output) plus the bias. outer and kron: one
# multiply per output element; linalg_cross 3 per output element (two multiplies, a subtract).
# _trilinear (bilinear's building block, forward and backward): 2 flops per element of the
# broadcast product of its three expanded operands, summed over `sumdim` into the output. Per-output work (sqrt, divide, eps clamps) is left out.
# Bytes: inputs read once, the output written once.

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
