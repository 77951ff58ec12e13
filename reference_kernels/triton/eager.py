"""Eager PyTorch references with exactly the launchers' signatures (KernelSpec.reference).

verify.py runs these on float64 copies of the inputs; they import nothing from triton.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.softmax(x, dim)


def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    return torch.log_softmax(x, dim)


def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    return F.layer_norm(x, normalized_shape, weight, bias, eps)


def rms_norm(x, normalized_shape, weight=None, eps: float | None = None):
    return F.rms_norm(x, normalized_shape, weight, eps)


def add_layer_norm(x, residual, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    h = x + residual
    return F.layer_norm(h, normalized_shape, weight, bias, eps), h


def add_rms_norm(x, residual, normalized_shape, weight=None, eps: float | None = None):
    h = x + residual
    return F.rms_norm(h, normalized_shape, weight, eps), h


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return F.gelu(x, approximate=approximate)


def silu(x: torch.Tensor) -> torch.Tensor:
    return F.silu(x)


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.silu(a) * b


def cross_entropy(logits, target, ignore_index: int = -100, reduction: str = "mean"):
    return F.cross_entropy(logits, target, ignore_index=ignore_index, reduction=reduction)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.mm(a, b)
