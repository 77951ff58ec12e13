"""swiglu(a, b) = silu(a) * b, the gated MLP activation, forward and backward."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_kernels.triton._common import (
    ELEMENTWISE_BLOCK, ELEMENTWISE_WARPS, acc_type, check_same_device, check_tensor,
    elementwise_grid, flat,
)


@triton.jit
def _swiglu_fwd(a_ptr, b_ptr, y_ptr, n, ACC: tl.constexpr, BLOCK: tl.constexpr):
    # Reads 2*n*elt (a, b), writes n*elt (y).
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(ACC)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(ACC)
    tl.store(y_ptr + offs, (a * tl.sigmoid(a) * b).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _swiglu_bwd(a_ptr, b_ptr, dy_ptr, da_ptr, db_ptr, n, ACC: tl.constexpr,
                BLOCK: tl.constexpr):
    # da = dy*b*s*(1 + a*(1 - s)), db = dy*a*s. Reads 3*n*elt (a, b, dy), writes 2*n*elt.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask, other=0.0).to(ACC)
    b = tl.load(b_ptr + offs, mask=mask, other=0.0).to(ACC)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(ACC)
    s = tl.sigmoid(a)
    da = dy * b * s * (1.0 + a * (1.0 - s))
    tl.store(da_ptr + offs, da.to(da_ptr.dtype.element_ty), mask=mask)
    tl.store(db_ptr + offs, (dy * a * s).to(db_ptr.dtype.element_ty), mask=mask)


def swiglu_fwd(a1d: torch.Tensor, b1d: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(a1d)
    if y.numel():
        _swiglu_fwd[elementwise_grid(y.numel())](a1d, b1d, y, y.numel(), ACC=acc_type(a1d.dtype),
                                                 BLOCK=ELEMENTWISE_BLOCK,
                                                 num_warps=ELEMENTWISE_WARPS)
    return y


def swiglu_bwd(a1d: torch.Tensor, b1d: torch.Tensor, dy1d: torch.Tensor):
    da, db = torch.empty_like(a1d), torch.empty_like(b1d)
    if da.numel():
        _swiglu_bwd[elementwise_grid(da.numel())](a1d, b1d, dy1d, da, db, da.numel(),
                                                  ACC=acc_type(a1d.dtype),
                                                  BLOCK=ELEMENTWISE_BLOCK,
                                                  num_warps=ELEMENTWISE_WARPS)
    return da, db


class _Swiglu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a1d, b1d = flat(a), flat(b)
        ctx.save_for_backward(a1d, b1d)
        return swiglu_fwd(a1d, b1d).view(a.shape)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        a1d, b1d = ctx.saved_tensors
        da, db = swiglu_bwd(a1d, b1d, flat(dy))
        return da.view(dy.shape), db.view(dy.shape)


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a) * b for same-shape, same-dtype a (gate) and b (up projection)."""
    check_tensor("swiglu", "a", a)
    check_tensor("swiglu", "b", b, dtypes=(a.dtype,))
    check_same_device("swiglu", a, b)
    if a.shape != b.shape:
        raise ValueError(f"swiglu: a has shape {list(a.shape)}, b has {list(b.shape)}; "
                         "they must match (no broadcasting)")
    return _Swiglu.apply(a, b)
