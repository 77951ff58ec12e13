"""`rms_norm_module`: every hand-written RMSNorm module computes through F.rms_norm instead.

Detection is try-kernel's (trykernel/patterns.py): a leaf module with one 1-D weight and
an eps whose forward takes a mean and an rsqrt, confirmed by a probe against RMSNorm.
The swap keeps the module, its weight and its eps; only its forward changes.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from kernel_advisor.actions.base import Action, NotApplicable, Variant, patched_forwards
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.trykernel.patterns import find_patterns, RMSNormMatch

_RMSNORM_CLASS = getattr(torch.nn, "RMSNorm", None)


def prepare(loaded: LoadedModel, mode: str) -> Variant:
    if not isinstance(loaded.model, torch.nn.Module):
        raise NotApplicable("the model is a callable, not an nn.Module")
    if not hasattr(F, "rms_norm"):
        raise NotApplicable(f"F.rms_norm needs torch >= 2.4 (this is {torch.__version__})")
    matches = [m for m in find_patterns(loaded.model) if isinstance(m, RMSNormMatch)
               and not (_RMSNORM_CLASS is not None and isinstance(m.module, _RMSNORM_CLASS))]
    if not matches:
        raise NotApplicable("no hand-written RMSNorm module found (nn.RMSNorm modules are left as they are)")
    tally = [0, 0]
    patches = [(m.module, _forward(m, tally)) for m in matches]
    return Variant("rms_norm_module", loaded.model, f"{len(matches)} RMSNorm module(s) through F.rms_norm",
                   context=lambda: patched_forwards(patches), counters=lambda: (tally[0], tally[1]))


def _forward(match: RMSNormMatch, tally: list[int]):
    original, weight = match.module.forward, match.weight

    def forward(x, *args, **kwargs):
        # The hand-written form promotes to the weight's dtype; F.rms_norm wants one dtype.
        if args or kwargs or not isinstance(x, torch.Tensor) or x.dtype != weight.dtype:
            tally[1] += 1
            return original(x, *args, **kwargs)
        tally[0] += 1
        eps = torch.finfo(x.dtype).eps if match.eps is None else match.eps
        return F.rms_norm(x, (x.shape[-1],), weight, eps)

    return forward


ACTION = Action("rms_norm_module", "nn.RMSNorm / F.rms_norm for hand-written RMSNorm", "library", prepare)
