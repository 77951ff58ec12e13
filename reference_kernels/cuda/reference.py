"""Eager PyTorch references of the CUDA kernels, with the wrappers' signatures (the kernels
that mirror a Triton launcher exactly, log_softmax and the activations, use
reference_kernels/triton/eager.py's).

KernelSpec.reference points here; a verifier calls them on float64 copies of the inputs.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.softmax(x, dim=dim)


def rms_norm(x: torch.Tensor, normalized_shape: int | Sequence[int],
             weight: torch.Tensor | None = None, eps: float | None = None) -> torch.Tensor:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return F.rms_norm(x, shape, weight, eps)


def layer_norm(x: torch.Tensor, normalized_shape: int | Sequence[int],
               weight: torch.Tensor | None = None, bias: torch.Tensor | None = None,
               eps: float = 1e-5) -> torch.Tensor:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    return F.layer_norm(x, shape, weight, bias, eps)


def bias_gelu(x: torch.Tensor, bias: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return F.gelu(x + bias, approximate=approximate)


def bias_silu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.silu(x + bias)

