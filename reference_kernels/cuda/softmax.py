"""softmax and log_softmax over the last dim through the CUDA C++ kernels (softmax.cu), with
their backward (backward.cu) as C++ autograd nodes (autograd.cpp)."""
from __future__ import annotations

import torch

from reference_kernels.cuda._checks import check_input, check_last_dim, check_on_cuda
from reference_kernels.cuda._dispatch import checked_call, fast_call


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """torch.softmax(x, dim) for the last dim of a contiguous CUDA tensor; output in x's dtype.

    fp32/fp16/bf16 accumulate in float, fp64 in double.
    """
    return _softmax(x, dim, False, "cuda.softmax")


def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """torch.log_softmax(x, dim) for the last dim of a contiguous CUDA tensor."""
    return _softmax(x, dim, True, "cuda.log_softmax")


def _softmax(x: torch.Tensor, dim: int, log: bool, name: str) -> torch.Tensor:
    y = fast_call("softmax", x, dim, log)
    if y is not None:
        return y
    check_input(x, name)
    check_last_dim(x, dim, name)
    check_on_cuda(x, name)
    return checked_call("softmax", x, log)
