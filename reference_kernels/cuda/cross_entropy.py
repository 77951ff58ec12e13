"""Cross-entropy of (rows, classes) logits against class targets through the CUDA C++ kernels
(cross_entropy.cu), with its gradient as a C++ autograd node (autograd.cpp)."""
from __future__ import annotations

import torch

from reference_kernels.cuda._checks import check_input, check_on_cuda
from reference_kernels.cuda._dispatch import checked_call, fast_call
from reference_kernels.errors import KernelInputError

# The int the kernels take (ka::Reduction in launchers.h).
REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                  reduction: str = "mean") -> torch.Tensor:
    """F.cross_entropy(logits, target, ignore_index=..., reduction=...) for (rows, classes)
    logits and (rows,) int64 or int32 class targets; the loss has the logits' dtype.

    A target outside [0, classes) other than ignore_index gives a NaN loss (eager raises a
    device-side assert)."""
    out = fast_call("cross_entropy", logits, target, ignore_index, REDUCTIONS.get(reduction, -1))
    if out is not None:
        return out[0]
    code = _check(logits, target, reduction)
    if target.dtype != torch.int64:
        target = target.long()
    return checked_call("cross_entropy", logits, target, int(ignore_index), code)[0]


def _check(logits: object, target: object, reduction: str) -> int:
    name = "cuda.cross_entropy"
    check_input(logits, name, "logits")
    if logits.dim() != 2 or logits.shape[1] == 0:
        raise KernelInputError(f"{name}: logits have shape {tuple(logits.shape)}",
                               "pass (rows, classes) logits, e.g. logits.view(-1, vocab)")
    if not isinstance(target, torch.Tensor) or target.dtype not in (torch.int64, torch.int32):
        raise KernelInputError(f"{name}: target must be an int64 or int32 tensor of class "
                               "indices", "pass class indices (probabilities: keep eager)")
    if target.shape != logits.shape[:1] or not target.is_contiguous():
        raise KernelInputError(f"{name}: target has shape {tuple(target.shape)}, logits "
                               f"{tuple(logits.shape)}",
                               "pass a contiguous (rows,) target, e.g. target.view(-1)")
    if target.device != logits.device:
        raise KernelInputError(f"{name}: target is on {target.device}, logits on "
                               f"{logits.device}", f"move target to {logits.device}")
    if reduction not in REDUCTIONS:
        raise KernelInputError(f"{name}: reduction={reduction!r}",
                               "pass reduction='mean', 'sum' or 'none'")
    check_on_cuda(logits, name, "logits")
    return REDUCTIONS[reduction]
