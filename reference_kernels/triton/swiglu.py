"""swiglu(a, b) = silu(a) * b, the gated MLP activation, forward and backward."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_kernels.triton._common import (
    ELEMENTWISE_BLOCK, ELEMENTWISE_WARPS, acc_type, check_same_device, check_tensor,
    dense, elementwise_grid,
)
from reference_kernels.triton._ops import kernel_op, launcher


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


def swiglu_fwd(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(a)
    n = int(y.numel())  # a SymInt while AOTAutograd traces the triton_op
    if n:
        launcher(_swiglu_fwd)[elementwise_grid(n)](
            a, b, y, n, ACC=acc_type(a.dtype), BLOCK=ELEMENTWISE_BLOCK,
            num_warps=ELEMENTWISE_WARPS)
    return y


def swiglu_bwd(a: torch.Tensor, b: torch.Tensor, dy: torch.Tensor):
    da, db = torch.empty_like(a), torch.empty_like(b)
    n = int(da.numel())  # a SymInt while AOTAutograd traces the triton_op
    if n:
        launcher(_swiglu_bwd)[elementwise_grid(n)](
            a, b, dy, da, db, n, ACC=acc_type(a.dtype), BLOCK=ELEMENTWISE_BLOCK,
            num_warps=ELEMENTWISE_WARPS)
    return da, db


def _like(x: torch.Tensor) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@kernel_op("swiglu", lambda a, b: _like(a))
def swiglu_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return swiglu_fwd(dense(a), dense(b))


@kernel_op("swiglu_backward", lambda a, b, dy: (_like(a), _like(b)))
def swiglu_backward_op(a: torch.Tensor, b: torch.Tensor, dy: torch.Tensor
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    return swiglu_bwd(dense(a), dense(b), dense(dy))


def _setup(ctx, inputs, output) -> None:
    ctx.save_for_backward(*inputs)


def _backward(ctx, dy: torch.Tensor):
    a, b = ctx.saved_tensors
    return swiglu_backward_op(a, b, dy)


swiglu_op.register_autograd(_backward, setup_context=_setup)


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """silu(a) * b for same-shape, same-dtype a (gate) and b (up projection)."""
    check_tensor("swiglu", "a", a)
    check_tensor("swiglu", "b", b, dtypes=(a.dtype,))
    check_same_device("swiglu", a, b)
    if a.shape != b.shape:
        raise ValueError(f"swiglu: a has shape {list(a.shape)}, b has {list(b.shape)}; "
                         "they must match (no broadcasting)")
    return swiglu_op(a, b)
