"""gelu, exact (erf) and tanh-approximated, forward and backward."""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_kernels.triton._common import (
    ELEMENTWISE_BLOCK, ELEMENTWISE_WARPS, acc_type, check_tensor, dense, elementwise_grid,
)
from reference_kernels.triton._ops import kernel_op, launcher

# Literals in the kernels (a compiled kernel reads only tl.constexpr globals, and the
# interpreter mishandles constexpr * tensor): sqrt(2/pi) = 0.7978845608028654,
# 2*sqrt(2/pi) = 1.5957691216057308, 1/sqrt(2) = 0.7071067811865476,
# 1/sqrt(2*pi) = 0.3989422804014327, log2(e)/2 = 0.7213475204444817,
# log2(sqrt(2*pi)) = 1.3257480647361593; the normal-tail coefficients and the clamp 6.0 are
# reference_kernels/normal_tail.py's LOG2_PHI_TAIL and CLAMP.


@triton.jit
def _normal_cdf16(x):
    # Phi(x) for 16-bit outputs: 7 FMAs + 1 ex2 where erff takes two polynomial branches and
    # an exp (which made the bf16 erf-GELU instruction-bound). NB: relative error <= ~6e-6
    # (normal_tail.py), far under half an fp16/bf16 ulp.
    a = tl.minimum(tl.abs(x), 6.0)
    r = a * -1.834886221e-06 + 6.159975692e-05
    r = r * a + -9.305359658e-04
    r = r * a + 8.507932121e-03
    r = r * a + -5.396014574e-02
    r = r * a + -4.584643275e-01
    r = r * a + -1.151251065e+00
    r = r * a + -9.999952935e-01
    tail = tl.exp2(r)  # Phi(-|x|)
    return tl.where(x < 0, tail, 1.0 - tail)


@triton.jit
def _normal_pdf16(x):
    # exp(-x^2/2)/sqrt(2 pi) as one FMA + one ex2 (2 ulp): for 16-bit outputs.
    return tl.exp2(x * x * -0.7213475204444817 - 1.3257480647361593)


@triton.jit
def _gelu_fwd(x_ptr, y_ptr, n, TANH: tl.constexpr, FAST16: tl.constexpr, ACC: tl.constexpr,
              BLOCK: tl.constexpr):
    # Reads n*elt, writes n*elt bytes.
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(ACC)
    if TANH:
        # 0.5*(1 + tanh(z)) == sigmoid(2z): no cancellation for negative x.
        y = x * tl.sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))
    elif FAST16:
        # |gelu| < 6e-9 below -6: x * 0 gives -0 there (and NaN for -inf), as eager does
        y = tl.where(x < -6.0, x * 0.0, x * _normal_cdf16(x))
    else:
        y = 0.5 * x * (1.0 + tl.math.erf(x * 0.7071067811865476))
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _gelu_bwd(x_ptr, dy_ptr, dx_ptr, n, TANH: tl.constexpr, FAST16: tl.constexpr,
              ACC: tl.constexpr, BLOCK: tl.constexpr):
    # Reads 2*n*elt (x, dy), writes n*elt (dx).
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(ACC)
    dy = tl.load(dy_ptr + offs, mask=mask, other=0.0).to(ACC)
    if TANH:
        # gelu = x*s with s = sigmoid(2z), z = c*(x + 0.044715x^3): gelu' = s + 2x*s*(1-s)*z'.
        s = tl.sigmoid(1.5957691216057308 * (x + 0.044715 * x * x * x))
        dz = 0.7978845608028654 * (1.0 + 3.0 * 0.044715 * x * x)
        grad = s + 2.0 * x * s * (1.0 - s) * dz
    elif FAST16:
        grad = tl.where(x < -6.0, 0.0, _normal_cdf16(x) + x * _normal_pdf16(x))
    else:
        # d/dx 0.5x(1 + erf(x/sqrt 2)) = 0.5(1 + erf(x/sqrt 2)) + x*exp(-x^2/2)/sqrt(2 pi)
        grad = (0.5 * (1.0 + tl.math.erf(x * 0.7071067811865476))
                + x * 0.3989422804014327 * tl.exp(-0.5 * x * x))
    tl.store(dx_ptr + offs, (dy * grad).to(dx_ptr.dtype.element_ty), mask=mask)


def _fast16(dtype: torch.dtype) -> bool:
    return dtype in (torch.float16, torch.bfloat16)


def gelu_fwd(x: torch.Tensor, tanh: bool) -> torch.Tensor:
    y = torch.empty_like(x)
    n = int(y.numel())  # a SymInt while AOTAutograd traces the triton_op
    if n:
        launcher(_gelu_fwd)[elementwise_grid(n)](
            x, y, n, TANH=tanh, FAST16=_fast16(x.dtype), ACC=acc_type(x.dtype),
            BLOCK=ELEMENTWISE_BLOCK, num_warps=ELEMENTWISE_WARPS)
    return y


def gelu_bwd(x: torch.Tensor, dy: torch.Tensor, tanh: bool) -> torch.Tensor:
    dx = torch.empty_like(x)
    n = int(dx.numel())  # a SymInt while AOTAutograd traces the triton_op
    if n:
        launcher(_gelu_bwd)[elementwise_grid(n)](
            x, dy, dx, n, TANH=tanh, FAST16=_fast16(x.dtype),
            ACC=acc_type(x.dtype), BLOCK=ELEMENTWISE_BLOCK, num_warps=ELEMENTWISE_WARPS)
    return dx


def _like(x: torch.Tensor, *_) -> torch.Tensor:
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@kernel_op("gelu", _like)
def gelu_op(x: torch.Tensor, approximate: str) -> torch.Tensor:
    return gelu_fwd(dense(x), approximate == "tanh")


@kernel_op("gelu_backward", _like)
def gelu_backward_op(x: torch.Tensor, dy: torch.Tensor, approximate: str) -> torch.Tensor:
    return gelu_bwd(dense(x), dense(dy), approximate == "tanh")


def _setup(ctx, inputs, output) -> None:
    x, approximate = inputs
    ctx.approximate = approximate
    ctx.save_for_backward(x)


def _backward(ctx, dy: torch.Tensor):
    (x,) = ctx.saved_tensors
    return gelu_backward_op(x, dy, ctx.approximate), None


gelu_op.register_autograd(_backward, setup_context=_setup)


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """torch.nn.functional.gelu(x, approximate) with approximate "none" (erf) or "tanh"."""
    check_tensor("gelu", "x", x)
    if approximate not in ("none", "tanh"):
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return gelu_op(x, approximate)
