"""GELU, SiLU and SwiGLU through the CUDA C++ kernels (pointwise.cu: the activations' forward
and backward, SwiGLU's); gradients are C++ autograd nodes (autograd.cpp)."""
from __future__ import annotations

import torch

from reference_kernels.cuda._checks import check_input, check_like, check_on_cuda
from reference_kernels.cuda._dispatch import checked_call, fast_call
from reference_kernels.errors import KernelInputError

# The int flag the kernels take (ka::Activation in launchers.h; bias_act.py uses the same).
GELU, GELU_TANH, SILU = 1, 2, 3


_GELU_FLAGS = {"none": GELU, "tanh": GELU_TANH}


def gelu(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    """F.gelu(x, approximate=approximate)."""
    y = fast_call("act", x, _GELU_FLAGS.get(approximate, -1))
    if y is not None:
        return y
    if approximate not in ("none", "tanh"):
        raise KernelInputError(f"cuda.gelu: approximate={approximate!r}",
                             "pass approximate='none' or 'tanh' (as F.gelu)")
    return _act(x, GELU if approximate == "none" else GELU_TANH, "cuda.gelu")


def silu(x: torch.Tensor) -> torch.Tensor:
    """F.silu(x) = x * sigmoid(x)."""
    y = fast_call("act", x, SILU)
    return y if y is not None else _act(x, SILU, "cuda.silu")


def swiglu(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """F.silu(a) * b for a and b of one shape."""
    y = fast_call("swiglu", a, b)
    if y is not None:
        return y
    check_input(a, "cuda.swiglu")
    check_like(b, a, "b", "cuda.swiglu")
    check_on_cuda(a, "cuda.swiglu")
    return checked_call("swiglu", a, b)


def _act(x: torch.Tensor, act: int, name: str) -> torch.Tensor:
    check_input(x, name)
    check_on_cuda(x, name)
    return checked_call("act", x, act)
