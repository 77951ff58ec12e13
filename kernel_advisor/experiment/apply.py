"""The measured plan applied to a model in the user's own script, through the same action code.

    model = apply_plan(model, example_inputs, ("channels_last", "compile:max-autotune-no-cudagraphs"))

The result is an nn.Module: calling it runs the configuration's model under its contexts
(flags, substitutions) with its input conversion (channels_last), exactly as `--measure`
timed it; its parameters are the ones the configuration trains (a copy, for channels_last).
"""
from __future__ import annotations

from typing import Any, Sequence

import torch

from kernel_advisor.actions import Variant
from kernel_advisor.collect.in_memory import loaded_from_module
from kernel_advisor.collect.tree import tensor_leaves
from kernel_advisor.experiment.variant import make_config, prepare_config


class PlannedModel(torch.nn.Module):
    """The user's model with the plan applied; `variant.close()` is called by `close()`."""

    def __init__(self, variant: Variant) -> None:
        super().__init__()
        self.variant = variant
        model = variant.params_of if isinstance(variant.params_of, torch.nn.Module) else variant.model
        self.planned = model if isinstance(model, torch.nn.Module) else None  # registers the trained parameters

    def forward(self, *inputs: Any) -> Any:
        v = self.variant
        with v.context():
            return v.model(*v.convert_inputs(list(inputs)))

    def close(self) -> None:
        self.variant.close()


def apply_plan(model: torch.nn.Module, example_inputs: Sequence[Any], actions: Sequence[str],
               mode: str = "inference", busy_frac: float | None = None) -> torch.nn.Module:
    """`model` with `actions` applied (the names `recommend --measure` planned), on the device of
    its parameters (or of the example inputs); `model` itself when `actions` is empty."""
    if not actions:
        return model
    device = _device(model, example_inputs)
    loaded = loaded_from_module(model, list(example_inputs), device=device.type)
    return PlannedModel(prepare_config(loaded, mode, make_config(actions), busy_frac))


def _device(model: torch.nn.Module, inputs: Sequence[Any]) -> torch.device:
    for p in model.parameters():
        return p.device
    for _, t in tensor_leaves(list(inputs)):
        return t.device
    return torch.device("cpu")
