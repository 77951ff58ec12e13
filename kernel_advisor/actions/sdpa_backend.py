"""`sdpa_cudnn`, `sdpa_flash`: F.scaled_dot_product_attention tries one fused backend first.

Which fused attention kernel is fastest depends on the GPU and the shape (head size, sequence
length, mask), and PyTorch's default order is one fixed guess. On Hopper, cuDNN's attention
is a FlashAttention-3-style kernel (warp-specialised, TMA); FlashAttention-2 is the other
candidate. The variant runs each step under `torch.nn.attention.sdpa_kernel(order,
set_priority=True)` with the chosen backend first: a call it cannot take (a mask or head size
it does not support) falls through to the next backend instead of failing, so the variant
changes only the calls the backend accepts.
"""
from __future__ import annotations

import torch

from kernel_advisor.actions.base import Action, NotApplicable, Variant
from kernel_advisor.collect.loader import LoadedModel

MIN_CAPABILITY = (8, 0)  # cuDNN's fused attention and FlashAttention-2: Ampere and newer
BACKENDS = {"sdpa_cudnn": "CUDNN_ATTENTION", "sdpa_flash": "FLASH_ATTENTION"}
_ALL = ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH")


def priority(first: str) -> list[str]:
    """The backend order with `first` in front, the rest in PyTorch's fused-first order."""
    return [first, *(b for b in _ALL if b != first)]


def _context(first: str):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    order = [getattr(SDPBackend, b) for b in priority(first)]
    return lambda: sdpa_kernel(order, set_priority=True)


def _preparer(name: str):
    first = BACKENDS[name]

    def prepare(loaded: LoadedModel, mode: str) -> Variant:
        if loaded.device.type != "cuda":
            raise NotApplicable("the fused attention backends run on CUDA devices only; this run is on the CPU")
        if torch.cuda.get_device_capability(loaded.device) < MIN_CAPABILITY:
            raise NotApplicable("the fused attention backends need compute capability 8.0 or newer")
        if first == "CUDNN_ATTENTION" and not torch.backends.cudnn.is_available():
            raise NotApplicable("this PyTorch build has no cuDNN")
        applied = f"sdpa_kernel([{', '.join(priority(first))}], set_priority=True) around the step"
        return Variant(name, loaded.model, applied, context=_context(first))

    return prepare


# effort 0: one context manager around the step, no change to the model's code.
ACTIONS = tuple(Action(name, f"SDPA through {first.split('_')[0].lower()} attention first", "library",
                       _preparer(name), effort=0)
                for name, first in BACKENDS.items())
