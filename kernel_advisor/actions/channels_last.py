"""`channels_last`: the model's 4-D weights and the 4-D inputs in NHWC memory order."""
from __future__ import annotations

import copy

import torch

from kernel_advisor.actions.base import Action, NotApplicable, Variant
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.tree import map_tensors


def prepare(loaded: LoadedModel, mode: str) -> Variant:
    model = loaded.model
    if not isinstance(model, torch.nn.Module):
        raise NotApplicable("the model is a callable, not an nn.Module")
    weights = [p for p in model.parameters() if p.dim() == 4]
    if not weights:
        raise NotApplicable("the model has no 4-D (convolution) weights")
    if all(p.is_contiguous(memory_format=torch.channels_last) for p in weights):
        raise NotApplicable("the 4-D weights are already channels_last")

    def to_nhwc(inputs: list) -> list:
        # Done once per input draw, as a data loader would: the conversion is not in the step.
        return map_tensors(inputs, lambda t: t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t)

    # A copy: converting the user's model in place would change eager's layout too.
    nhwc = copy.deepcopy(model).to(memory_format=torch.channels_last)
    return Variant("channels_last", nhwc, f"{len(weights)} 4-D weights and the 4-D inputs in channels_last",
                   params_of=nhwc, convert_inputs=to_nhwc)


ACTION = Action("channels_last", "channels_last memory format", "library", prepare)
