"""`bf16_autocast`: run the float32 model's steps under torch.autocast(dtype=bfloat16)."""
from __future__ import annotations

import torch

from kernel_advisor.actions.base import Action, NotApplicable, Variant
from kernel_advisor.collect.loader import LoadedModel

# NB: bfloat16 keeps 8 mantissa bits (relative rounding 2^-9 per product input); over a
# model's depth the output drifts by a few 1e-3 to 1e-2, so the gate allows 5e-2 — the
# measured error is reported beside the speedup either way.
AUTOCAST_TOLERANCE = (5e-2, 5e-2)


def prepare(loaded: LoadedModel, mode: str) -> Variant:
    if getattr(loaded, "autocast", None) is not None:
        raise NotApplicable("the run already uses --autocast")
    dtypes = _float_param_dtypes(loaded.model)
    if dtypes and dtypes != {torch.float32}:
        names = ", ".join(sorted(str(d).replace("torch.", "") for d in dtypes))
        raise NotApplicable(f"the model's parameters are {names}, not float32: nothing to autocast")
    if loaded.device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise NotApplicable("this GPU has no bfloat16 tensor cores")
    device_type = loaded.device.type
    return Variant("bf16_autocast", loaded.model, f"torch.autocast('{device_type}', dtype=torch.bfloat16)",
                   context=lambda: torch.autocast(device_type, dtype=torch.bfloat16),
                   tolerance=lambda dtype: AUTOCAST_TOLERANCE)


def _float_param_dtypes(model) -> set[torch.dtype]:
    if not isinstance(model, torch.nn.Module):
        return set()
    return {p.dtype for p in model.parameters() if p.is_floating_point()}


ACTION = Action("bf16_autocast", "bfloat16 autocast", "library", prepare, exclusive="precision")
