"""layer_norm and the fused residual add + layer_norm (kernels and operators in norm.py)."""
from __future__ import annotations

import torch

from reference_kernels.triton._common import check_same_device, check_tensor
from reference_kernels.triton.norm import add_layer_norm_op, check_norm_args, layer_norm_op


def _check_params(fn_name: str, x, weight, bias) -> None:
    check_tensor(fn_name, "x", x)
    for name, p in (("weight", weight), ("bias", bias)):
        if p is not None:
            check_tensor(fn_name, name, p)
    check_same_device(fn_name, x, weight, bias)


def layer_norm(x: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:
    """torch.nn.functional.layer_norm, with or without an affine weight and bias."""
    _check_params("layer_norm", x, weight, bias)
    shape = check_norm_args("layer_norm", x, normalized_shape, ("weight", weight), ("bias", bias))
    return layer_norm_op(x, shape, weight, bias, float(eps))[0]


def add_layer_norm(x: torch.Tensor, residual: torch.Tensor, normalized_shape,
                   weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
                   eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    """(layer_norm(x + residual), x + residual) in one pass: the pre-norm transformer step."""
    _check_params("add_layer_norm", x, weight, bias)
    check_tensor("add_layer_norm", "residual", residual, dtypes=(x.dtype,))
    check_same_device("add_layer_norm", x, residual)
    if residual.shape != x.shape:
        raise ValueError(f"add_layer_norm: residual has shape {list(residual.shape)}, "
                         f"x has {list(x.shape)}; they must match")
    shape = check_norm_args("add_layer_norm", x, normalized_shape, ("weight", weight),
                            ("bias", bias))
    y, h, _, _ = add_layer_norm_op(x, residual, shape, weight, bias, float(eps))
    return y, h
