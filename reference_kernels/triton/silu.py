"""silu (x * sigmoid(x)), forward and backward."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_kernels.triton._common import (
    ELEMENTWISE_BLOCK, ELEMENTWISE_WARPS, acc_type, check_tensor, elementwise_grid, flat,
)


@triton.jit
def _silu_fwd(x_ptr, y_ptr, n, ACC: tl.constexpr, BLOCK: tl.constexpr):
    # Reads n*elt, writes n*elt bytes.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(ACC)
    tl.store(y_ptr + offs, (x * tl.sigmoid(x)).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _silu_bwd(x_ptr, dy_ptr, dx_ptr, n, ACC: tl.constexpr, BLOCK: tl.constexpr):
    # d/dx x*s(x) = s*(1 + x*(1 - s)). Reads 2*n*elt (x, dy), writes n*elt (dx).
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(ACC)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(ACC)
    s = tl.sigmoid(x)
    tl.store(dx_ptr + offs, (dy * s * (1.0 + x * (1.0 - s))).to(dx_ptr.dtype.element_ty),
             mask=mask)


def silu_fwd(x1d: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x1d)
    if y.numel():
        _silu_fwd[elementwise_grid(y.numel())](x1d, y, y.numel(), ACC=acc_type(x1d.dtype),
                                               BLOCK=ELEMENTWISE_BLOCK, num_warps=ELEMENTWISE_WARPS)
    return y


def silu_bwd(x1d: torch.Tensor, dy1d: torch.Tensor) -> torch.Tensor:
    dx = torch.empty_like(x1d)
    if dx.numel():
        _silu_bwd[elementwise_grid(dx.numel())](x1d, dy1d, dx, dx.numel(),
                                                ACC=acc_type(x1d.dtype), BLOCK=ELEMENTWISE_BLOCK,
                                                num_warps=ELEMENTWISE_WARPS)
    return dx


class _Silu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        x1d = flat(x)
        ctx.save_for_backward(x1d)
        return silu_fwd(x1d).view(x.shape)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):
        (x1d,) = ctx.saved_tensors
        return silu_bwd(x1d, flat(dy)).view(dy.shape)


def silu(x: torch.Tensor) -> torch.Tensor:
    """torch.nn.functional.silu(x)."""
    check_tensor("silu", "x", x)
    return _Silu.apply(x)
