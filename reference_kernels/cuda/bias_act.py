"""Fused y = act(x + bias) over the last dim through the CUDA C++ kernel (bias_act.cu);
forward only."""
from __future__ import annotations

import torch

from reference_kernels.errors import KernelInputError
from reference_kernels.cuda._checks import (check_forward_only, check_input, check_on_cuda,
                                            check_param)
from reference_kernels.cuda._dispatch import checked_call

# The int flag the kernel takes (ka::Activation in launchers.h).
ACTIVATIONS: dict[str, int] = {"relu": 0, "gelu": 1, "gelu_tanh": 2, "silu": 3}


def bias_act(x: torch.Tensor, bias: torch.Tensor, act: str) -> torch.Tensor:
    """act(x + bias) with bias of shape (x.shape[-1],); act is relu, gelu, gelu_tanh or silu.

    Computed in float (double for fp64) and rounded once; eager PyTorch rounds x + bias to
    x's dtype first, so fp16/bf16 results can differ from eager by one rounding.
    """
    if act not in ACTIVATIONS:
        raise KernelInputError(f"cuda.bias_act: unknown activation {act!r}",
                             f"choose one of {', '.join(ACTIVATIONS)}")
    check_input(x, f"cuda.bias_{act}")
    if bias is None:
        raise KernelInputError(f"cuda.bias_{act}: bias is None", "pass the per-column bias")
    check_param(bias, x, (x.shape[-1],), "bias", f"cuda.bias_{act}")
    check_forward_only(x, "x", f"cuda.bias_{act}")
    check_forward_only(bias, "bias", f"cuda.bias_{act}")
    check_on_cuda(x, f"cuda.bias_{act}")
    return checked_call("bias_act", x, bias, ACTIVATIONS[act])


def bias_gelu(x: torch.Tensor, bias: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """F.gelu(x + bias, approximate=approximate), fused."""
    if approximate not in ("none", "tanh"):
        raise KernelInputError(f"cuda.bias_gelu: approximate={approximate!r}",
                             "pass approximate='none' or 'tanh' (as F.gelu)")
    return bias_act(x, bias, "gelu" if approximate == "none" else "gelu_tanh")


def bias_silu(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """F.silu(x + bias), fused."""
    return bias_act(x, bias, "silu")
