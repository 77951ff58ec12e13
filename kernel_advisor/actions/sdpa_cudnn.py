"""`sdpa_cudnn`: F.scaled_dot_product_attention tries cuDNN's fused attention first.

PyTorch's default order picks FlashAttention-2 (or the memory-efficient kernel) before cuDNN.
On Hopper, cuDNN's attention is a FlashAttention-3-style kernel (warp-specialised, TMA) that
the default order never reaches. The variant runs each step under
`torch.nn.attention.sdpa_kernel([CUDNN, FLASH, EFFICIENT, MATH], set_priority=True)`: a call
cuDNN cannot take (a mask or head size it does not support) falls through to the next backend
instead of failing, so the variant changes only the calls cuDNN accepts.
"""
from __future__ import annotations

import torch

from kernel_advisor.actions.base import Action, NotApplicable, Variant
from kernel_advisor.collect.loader import LoadedModel

MIN_CAPABILITY = (8, 0)  # cuDNN's fused attention: Ampere and newer (its fastest kernels are Hopper's)
APPLIED = ("sdpa_kernel([CUDNN_ATTENTION, FLASH_ATTENTION, EFFICIENT_ATTENTION, MATH], "
           "set_priority=True) around the step")


def _cudnn_first():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION,
             SDPBackend.MATH]
    return sdpa_kernel(order, set_priority=True)


def prepare(loaded: LoadedModel, mode: str) -> Variant:
    if loaded.device.type != "cuda":
        raise NotApplicable("cuDNN attention runs on CUDA devices only; this run is on the CPU")
    if torch.cuda.get_device_capability(loaded.device) < MIN_CAPABILITY:
        raise NotApplicable("cuDNN's fused attention needs compute capability 8.0 or newer")
    if not torch.backends.cudnn.is_available():
        raise NotApplicable("this PyTorch build has no cuDNN")
    return Variant("sdpa_cudnn", loaded.model, APPLIED, context=_cudnn_first)


# effort 0: one context manager around the step, no change to the model's code.
ACTION = Action("sdpa_cudnn", "SDPA through cuDNN attention first", "library", prepare, effort=0)
