"""rms_norm, layer_norm and native_layer_norm through the CUDA C++ kernels (norms.cu), with
their backward (backward.cu) as a C++ autograd formula."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from reference_kernels.cuda._checks import (check_input, check_on_cuda, check_param,
                                            normalized_shape_of)
from reference_kernels.cuda._dispatch import compiling, extension, operator


def rms_norm(x: torch.Tensor, normalized_shape: int | Sequence[int],
             weight: torch.Tensor | None = None, eps: float | None = None) -> torch.Tensor:
    """F.rms_norm: x * rsqrt(mean(x^2) + eps) * weight; eps None means finfo(x.dtype).eps."""
    return fused_rms_norm(x, normalized_shape, weight, eps)[0]


def fused_rms_norm(x: torch.Tensor, normalized_shape: int | Sequence[int],
                   weight: torch.Tensor | None, eps: float | None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """aten::_fused_rms_norm: (y, rstd); rstd is float (double for fp64), shaped like x with
    each normalized dim set to 1."""
    shape = normalized_shape_of(check_input(x, "cuda.rms_norm"), normalized_shape, "cuda.rms_norm")
    check_param(weight, x, shape, "weight", "cuda.rms_norm")
    check_on_cuda(x, "cuda.rms_norm")
    eps_value = torch.finfo(x.dtype).eps if eps is None else float(eps)
    if compiling():
        y, rstd = operator("rms_norm")(x, list(shape), weight, eps_value)
    else:
        y, rstd = extension().op_rms_norm(x, list(shape), weight, eps_value)
    return y, rstd


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
    shape = normalized_shape_of(check_input(x, "cuda.layer_norm"), normalized_shape,
                                "cuda.layer_norm")
    check_param(weight, x, shape, "weight", "cuda.layer_norm")
    check_param(bias, x, shape, "bias", "cuda.layer_norm")
    check_on_cuda(x, "cuda.layer_norm")
    if compiling():
        y, mean, rstd = operator("layer_norm")(x, list(shape), weight, bias, float(eps))
    else:
        y, mean, rstd = extension().op_layer_norm(x, list(shape), weight, bias, float(eps))
    return y, mean, rstd
