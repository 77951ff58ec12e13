"""rms_norm, layer_norm (and native_layer_norm) and their residual forms add_rms_norm and
add_layer_norm through the CUDA C++ kernels (norms.cu), with their backward (backward.cu) as
C++ autograd nodes (autograd.cpp)."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from reference_kernels.cuda._checks import (SUPPORTED_DTYPES, check_input, check_like,
                                            check_on_cuda, check_param, normalized_shape_of)
from reference_kernels.cuda._dispatch import checked_call, fast_call


def rms_norm(x: torch.Tensor, normalized_shape: int | Sequence[int],
             weight: torch.Tensor | None = None, eps: float | None = None) -> torch.Tensor:
    """F.rms_norm: x * rsqrt(mean(x^2) + eps) * weight; eps None means finfo(x.dtype).eps."""
    return fused_rms_norm(x, normalized_shape, weight, eps)[0]


def fused_rms_norm(x: torch.Tensor, normalized_shape: int | Sequence[int],
                   weight: torch.Tensor | None, eps: float | None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """aten::_fused_rms_norm: (y, rstd); rstd is float (double for fp64), shaped like x with
    each normalized dim set to 1."""
    out = fast_call("rms_norm", x, normalized_shape, weight, eps)
    if out is not None:
        return out
    shape = _norm_args(x, normalized_shape, weight, None, "cuda.rms_norm")
    return checked_call("rms_norm", x, shape, weight, _eps(x, eps))


def layer_norm(x: torch.Tensor, normalized_shape: int | Sequence[int],
               weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    """F.layer_norm: (x - mean) / sqrt(var + eps) * weight + bias over the normalized dims."""
    return native_layer_norm(x, normalized_shape, weight, bias, eps)[0]


def native_layer_norm(x: torch.Tensor, normalized_shape: int | Sequence[int],
                      weight: torch.Tensor | None, bias: torch.Tensor | None,
                      eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """aten::native_layer_norm: (y, mean, rstd); the statistics are float (double for fp64),
    shaped like x with each normalized dim set to 1, as on CUDA."""
    out = fast_call("layer_norm", x, normalized_shape, weight, bias, eps)
    if out is not None:
        return out
    shape = _norm_args(x, normalized_shape, weight, bias, "cuda.layer_norm")
    return checked_call("layer_norm", x, shape, weight, bias, float(eps))


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, normalized_shape: int | Sequence[int],
                 weight: torch.Tensor | None = None, eps: float | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """(F.rms_norm(h, ...), h) with h = x + residual: the pre-norm transformer step."""
    out = fast_call("add_rms_norm", x, residual, normalized_shape, weight, eps)
    if out is not None:
        return out[0], out[1]
    check_like(residual, check_input(x, "cuda.add_rms_norm"), "residual", "cuda.add_rms_norm")
    shape = _norm_args(x, normalized_shape, weight, None, "cuda.add_rms_norm")
    y, h, _ = checked_call("add_rms_norm", x, residual, shape, weight, _eps(x, eps))
    return y, h


def add_layer_norm(x: torch.Tensor, residual: torch.Tensor, normalized_shape: int | Sequence[int],
                   weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                   eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """(F.layer_norm(h, ...), h) with h = x + residual."""
    out = fast_call("add_layer_norm", x, residual, normalized_shape, weight, bias, eps)
    if out is not None:
        return out[0], out[1]
    check_like(residual, check_input(x, "cuda.add_layer_norm"), "residual", "cuda.add_layer_norm")
    shape = _norm_args(x, normalized_shape, weight, bias, "cuda.add_layer_norm")
    y, h, _, _ = checked_call("add_layer_norm", x, residual, shape, weight, bias, float(eps))
    return y, h


_EPS = {dtype: torch.finfo(dtype).eps for dtype in SUPPORTED_DTYPES}


def _eps(x: torch.Tensor, eps: float | None) -> float:
    """eps None means finfo(x.dtype).eps, as F.rms_norm."""
    return _EPS[x.dtype] if eps is None else float(eps)


def _norm_args(x, normalized_shape, weight, bias, op: str) -> list[int]:
    shape = normalized_shape_of(check_input(x, op), normalized_shape, op)
    check_param(weight, x, shape, "weight", op)
    check_param(bias, x, shape, "bias", op)
    check_on_cuda(x, op)
    return list(shape)
