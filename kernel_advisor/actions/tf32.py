"""`tf32`: float32 matmuls and convolutions on TF32 tensor cores (10-bit mantissa)."""
from __future__ import annotations

import torch

from kernel_advisor.actions.base import Action, NotApplicable, Variant
from kernel_advisor.actions.flags import current, flags_context
from kernel_advisor.collect.loader import LoadedModel

# NB: TF32 rounds the inputs of each product to a 10-bit mantissa (relative error ~2^-11);
# the gate holds the model to bfloat16-class tolerances instead of float32 ones.
TF32_TOLERANCE = (2e-2, 2e-2)


def prepare(loaded: LoadedModel, mode: str) -> Variant:
    if loaded.device.type != "cuda":
        raise NotApplicable("TF32 is a tensor-core path of CUDA devices; this run is on the CPU")
    if torch.cuda.get_device_capability(loaded.device) < (8, 0):
        raise NotApplicable("TF32 needs compute capability 8.0 or newer")
    flags = {"cuda.matmul.allow_tf32": True, "cudnn.allow_tf32": True}
    if all(current(k) for k in flags):
        raise NotApplicable("TF32 is already on for matmuls and convolutions")
    return Variant("tf32", loaded.model, "allow_tf32 on for matmul and cuDNN", context=flags_context(flags),
                   tolerance=lambda dtype: TF32_TOLERANCE)


ACTION = Action("tf32", "TF32 for float32 matmul and convolution", "library", prepare)
