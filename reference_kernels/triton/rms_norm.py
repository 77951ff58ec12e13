"""rms_norm and the fused residual add + rms_norm (kernels and operators in norm.py)."""
from __future__ import annotations

import torch

from reference_kernels.triton._common import check_same_device, check_tensor
from reference_kernels.triton.norm import add_rms_norm_op, check_norm_args, rms_norm_op


def _eps_for(x: torch.Tensor, eps: float | None) -> float:
    # As torch.nn.functional.rms_norm: eps=None means the machine epsilon of x's dtype.
    return float(torch.finfo(x.dtype).eps if eps is None else eps)


def _check_params(fn_name: str, x, weight) -> None:
    check_tensor(fn_name, "x", x)
    if weight is not None:
        check_tensor(fn_name, "weight", weight)
    check_same_device(fn_name, x, weight)


def rms_norm(x: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None,
             eps: float | None = None) -> torch.Tensor:
    """torch.nn.functional.rms_norm, with or without a weight."""
    _check_params("rms_norm", x, weight)
    shape = check_norm_args("rms_norm", x, normalized_shape, ("weight", weight))
    return rms_norm_op(x, shape, weight, _eps_for(x, eps))[0]


def add_rms_norm(x: torch.Tensor, residual: torch.Tensor, normalized_shape,
                 weight: torch.Tensor | None = None,
                 eps: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(rms_norm(x + residual), x + residual) in one pass: the pre-norm transformer step."""
    _check_params("add_rms_norm", x, weight)
    check_tensor("add_rms_norm", "residual", residual, dtypes=(x.dtype,))
    check_same_device("add_rms_norm", x, residual)
    if residual.shape != x.shape:
        raise ValueError(f"add_rms_norm: residual has shape {list(residual.shape)}, "
                         f"x has {list(x.shape)}; they must match")
    shape = check_norm_args("add_rms_norm", x, normalized_shape, ("weight", weight))
    y, h, _ = add_rms_norm_op(x, residual, shape, weight, _eps_for(x, eps))
    return y, h
