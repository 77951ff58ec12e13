"""`pad_gemm`: nn.Linear layers with a dim off 16-byte alignment run on a zero-padded weight.

out = linear(pad(x), pad(W), pad(b))[..., :N] equals linear(x, W, b): the padded input
columns meet zero weight rows, the padded output columns are cut off. In inference the
padded copies are made once; in training they are padded per call so gradients reach the
user's own weight.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from kernel_advisor.actions.base import Action, NotApplicable, Variant, patched_forwards
from kernel_advisor.collect.loader import LoadedModel

ALIGN_BYTES = 16  # cuBLAS tensor-core kernels want leading dimensions on 16-byte boundaries


def padded_size(n: int, itemsize: int) -> int:
    align = max(ALIGN_BYTES // itemsize, 1)
    return -(-n // align) * align


def prepare(loaded: LoadedModel, mode: str) -> Variant:
    if not isinstance(loaded.model, torch.nn.Module):
        raise NotApplicable("the model is a callable, not an nn.Module")
    linears = [m for m in loaded.model.modules() if isinstance(m, torch.nn.Linear) and _misaligned(m)]
    if not linears:
        raise NotApplicable("every nn.Linear already has 16-byte aligned dims")
    patches = [(m, _forward(m, train=mode == "train")) for m in linears]
    shapes = ", ".join(f"{m.in_features}x{m.out_features}" for m in linears[:3])
    more = f" (+{len(linears) - 3} more)" if len(linears) > 3 else ""
    return Variant("pad_gemm", loaded.model, f"{len(linears)} Linear layer(s) padded: {shapes}{more}",
                   context=lambda: patched_forwards(patches))


def _misaligned(m: torch.nn.Linear) -> bool:
    size = m.weight.element_size()
    return padded_size(m.in_features, size) != m.in_features or padded_size(m.out_features, size) != m.out_features


def _forward(m: torch.nn.Linear, train: bool):
    size = m.weight.element_size()
    n, k = m.out_features, m.in_features
    pad_n, pad_k = padded_size(n, size) - n, padded_size(k, size) - k
    frozen = None
    if not train:
        with torch.no_grad():
            frozen = _padded(m, pad_n, pad_k)

    def forward(x):
        weight, bias = frozen if frozen is not None else _padded(m, pad_n, pad_k)
        if pad_k:
            x = F.pad(x, (0, pad_k))
        return F.linear(x, weight, bias)[..., :n]

    return forward


def _padded(m: torch.nn.Linear, pad_n: int, pad_k: int):
    bias = F.pad(m.bias, (0, pad_n)) if m.bias is not None else None
    return F.pad(m.weight, (0, pad_k, 0, pad_n)), bias


ACTION = Action("pad_gemm", "pad Linear dims to 16-byte multiples", "library", prepare)
