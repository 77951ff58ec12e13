"""Argument checks of the CUDA kernel wrappers, raised as KernelInputError before any build.

The C++ binding checks the same things with TORCH_CHECK; checking here first gives the user a
(problem, fix) pair and lets the checks run on machines without a GPU. Structure (dtype, shape,
layout) is checked before the device, so every check can be exercised with CPU tensors.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from reference_kernels.errors import KernelInputError

SUPPORTED_DTYPES: tuple[torch.dtype, ...] = (
    torch.float32, torch.float16, torch.bfloat16, torch.float64)


def check_input(x: object, op: str, name: str = "x") -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise KernelInputError(f"{op}: {name} must be a torch.Tensor, got {type(x).__name__}",
                             "pass a tensor")
    if x.dtype not in SUPPORTED_DTYPES:
        raise KernelInputError(f"{op}: dtype {x.dtype} is not supported",
                             "use float32, float16, bfloat16 or float64")
    if x.dim() < 1:
        raise KernelInputError(f"{op}: {name} is 0-dimensional",
                             "pass a tensor with at least one dim")
    if not x.is_contiguous():
        raise KernelInputError(f"{op}: {name} is not contiguous (shape {tuple(x.shape)}, strides "
                             f"{x.stride()})", "call .contiguous() first, or keep the eager op")
    return x


def check_param(p: object, x: torch.Tensor, shape: tuple[int, ...], name: str, op: str) -> None:
    """weight / bias: None, or a contiguous tensor of `shape` with x's dtype and device."""
    if p is None:
        return
    if not isinstance(p, torch.Tensor):
        raise KernelInputError(f"{op}: {name} must be a tensor or None, got {type(p).__name__}",
                             f"pass {name} as a tensor")
    if tuple(p.shape) != shape:
        raise KernelInputError(f"{op}: {name} has shape {tuple(p.shape)}, expected {shape}",
                             f"pass a {name} shaped like the normalized dims")
    if p.dtype != x.dtype:
        raise KernelInputError(f"{op}: {name} dtype {p.dtype} differs from x dtype {x.dtype}",
                             f"cast {name} with .to({x.dtype})")
    if not p.is_contiguous():
        raise KernelInputError(f"{op}: {name} is not contiguous", f"call {name}.contiguous()")
    if p.device != x.device:
        raise KernelInputError(f"{op}: {name} is on {p.device}, x on {x.device}",
                             f"move {name} to {x.device}")


def check_like(t: object, x: torch.Tensor, name: str, op: str) -> None:
    """A second operand of an element-wise op: x's shape, dtype and device, contiguous."""
    if not isinstance(t, torch.Tensor):
        raise KernelInputError(f"{op}: {name} must be a tensor, got {type(t).__name__}",
                             f"pass {name} as a tensor")
    if t.shape != x.shape:
        raise KernelInputError(f"{op}: {name} has shape {tuple(t.shape)}, x {tuple(x.shape)}",
                             "pass operands of one shape (broadcast them first)")
    check_param(t, x, tuple(x.shape), name, op)


def normalized_shape_of(x: torch.Tensor, normalized_shape: int | Sequence[int],
                        op: str) -> tuple[int, ...]:
    """normalized_shape as a tuple, checked against x's trailing dims (as torch does)."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or len(shape) > x.dim() or tuple(x.shape[x.dim() - len(shape):]) != shape:
        raise KernelInputError(f"{op}: normalized_shape {shape} is not the trailing dims of x "
                             f"{tuple(x.shape)}", "pass the last dims of x, e.g. (x.shape[-1],)")
    return shape


def check_last_dim(x: torch.Tensor, dim: int, op: str) -> None:
    if dim not in (-1, x.dim() - 1):
        raise KernelInputError(f"{op}: dim={dim}; the CUDA kernel reduces the last dim only",
                             "pass dim=-1, or keep the eager op for other dims")


def check_on_cuda(x: torch.Tensor, op: str, name: str = "x") -> None:
    if not x.is_cuda:
        raise KernelInputError(f"{op}: {name} is on {x.device}; the CUDA kernels take CUDA "
                             "tensors",
                             "move the tensors with .cuda(), or use the Triton or eager op")


def check_forward_only(t: torch.Tensor | None, name: str, op: str) -> None:
    """For the kernels without a backward (bias_act): an output silently detached from a
    tensor that requires grad would train wrongly, so refuse instead."""
    if t is not None and t.requires_grad and torch.is_grad_enabled():
        raise KernelInputError(f"{op}: {name} requires grad, but this CUDA kernel is "
                             "forward-only", "call under torch.no_grad() or torch.inference_mode()")
