"""softmax(x, dim=-1) through the CUDA C++ kernel (softmax.cu); forward only."""
from __future__ import annotations

import torch

from reference_kernels.cuda._checks import check_input, check_last_dim, check_on_cuda
from reference_kernels.cuda.build import load_extension


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """torch.softmax(x, dim) for the last dim of a contiguous CUDA tensor; output in x's dtype.

    fp32/fp16/bf16 accumulate in float, fp64 in double.
    """
    check_input(x, "cuda.softmax")
    check_last_dim(x, dim, "cuda.softmax")
    check_on_cuda(x, "cuda.softmax")
    return load_extension().softmax(x)
