"""silu (x * sigmoid(x)), forward and backward."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_kernels.triton._common import (
    ELEMENTWISE_BLOCK, ELEMENTWISE_WARPS, acc_type, check_tensor, dense, elementwise_grid,
)
from reference_kernels.triton._ops import kernel_op, launcher


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


def silu_fwd(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    n = int(y.numel())  # a SymInt while AOTAutograd traces the triton_op
    if n:
        launcher(_silu_fwd)[elementwise_grid(n)](
            x, y, n, ACC=acc_type(x.dtype), BLOCK=ELEMENTWISE_BLOCK,
            num_warps=ELEMENTWISE_WARPS)
    return y


def silu_bwd(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    dx = torch.empty_like(x)
    n = int(dx.numel())  # a SymInt while AOTAutograd traces the triton_op
    if n:
        launcher(_silu_bwd)[elementwise_grid(n)](
            x, dy, dx, n, ACC=acc_type(x.dtype), BLOCK=ELEMENTWISE_BLOCK,
            num_warps=ELEMENTWISE_WARPS)
    return dx


def _like(x: torch.Tensor, *_) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@kernel_op("silu", _like)
def silu_op(x: torch.Tensor) -> torch.Tensor:
    return silu_fwd(dense(x))


@kernel_op("silu_backward", _like)
def silu_backward_op(x: torch.Tensor, dy: torch.Tensor) -> torch.Tensor:
    return silu_bwd(dense(x), dense(dy))


def _setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(inputs[0])


def _backward(ctx, dy: torch.Tensor):
    (x,) = ctx.saved_tensors
    return silu_backward_op(x, dy)


silu_op.register_autograd(_backward, setup_context=_setup)


def silu(x: torch.Tensor) -> torch.Tensor:
    """torch.nn.functional.silu(x)."""
    check_tensor("silu", "x", x)
    return silu_op(x)
