"""`cudnn_benchmark`: torch.backends.cudnn.benchmark = True (cuDNN times its algorithms once per shape)."""
from __future__ import annotations

import torch

from kernel_advisor.actions.base import Action, NotApplicable, Variant
from kernel_advisor.actions.flags import flags_context
from kernel_advisor.collect.loader import LoadedModel


def prepare(loaded: LoadedModel, mode: str) -> Variant:
    if loaded.device.type != "cuda":
        raise NotApplicable("cuDNN runs on CUDA devices only; this run is on the CPU")
    if torch.backends.cudnn.benchmark:
        raise NotApplicable("torch.backends.cudnn.benchmark is already on")
    return Variant("cudnn_benchmark", loaded.model, "torch.backends.cudnn.benchmark = True",
                   context=flags_context({"cudnn.benchmark": True}))


ACTION = Action("cudnn_benchmark", "cudnn.benchmark = True", "library", prepare, effort=0)
