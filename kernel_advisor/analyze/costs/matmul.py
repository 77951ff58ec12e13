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
from kernel_advisor.analyze.costs.common import io_cost, written
from kernel_advisor.analyze.costs.registry import OpCost, register
from kernel_advisor.analyze.costs.shapes import Unmodelled, broadcast


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
