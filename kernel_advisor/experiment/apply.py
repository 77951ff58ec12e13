"""The plan as code: `--emit-plan` writes a module calling `apply_plan`, which applies the
measured plan to a model in the user's own script through the same action code.

    model = apply_plan(model, example_inputs, ("channels_last", "compile:max-autotune-no-cudagraphs"))

The result is an nn.Module: calling it runs the configuration's model under its contexts
(flags, substitutions) with its input conversion (channels_last), exactly as `--measure`
timed it; its parameters are the ones the configuration trains (a copy, for channels_last).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch

from kernel_advisor.actions import Variant
from kernel_advisor.collect.in_memory import loaded_from_module
from kernel_advisor.collect.rundir import write_text_atomic
from kernel_advisor.collect.tree import tensor_leaves
from kernel_advisor.errors import UserInputError
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


# ------------------------------------------------------------
# `--emit-plan plan.py`: the measured plan as a module a training script imports.
#
# The module holds the plan's action names and calls `apply_plan` (apply.py), so the script
# runs exactly what was measured. A file is written only where none is, or where one we wrote
# before is (its first line says so): nothing the user wrote is replaced.

MARK = "# Written by `advisor recommend --measure --emit-plan`"


def plan_module(actions: Sequence[str], mode: str, summary: str) -> str:
    """The module's text: `apply_plan(model, example_inputs) -> model`."""
    return f'''{MARK}: the measured plan as code.
"""{summary}

    from plan import apply_plan
    model = apply_plan(model, example_inputs)  # before building the optimizer
"""
from kernel_advisor.experiment.apply import apply_plan as _apply_plan

PLAN = {tuple(actions)!r}
MODE = {mode!r}


def apply_plan(model, example_inputs):
    """`model` with the measured plan applied (the same action code `--measure` timed)."""
    return _apply_plan(model, example_inputs, PLAN, mode=MODE)
'''


def check_plan_path(path: Path) -> None:
    """Refuse, before any measuring, a path the plan module may not be written to."""
    path = Path(path)
    if path.suffix != ".py":
        raise UserInputError(f"--emit-plan {path.name}: not a .py file", "name a module, e.g. --emit-plan plan.py")
    if path.exists() and (not path.is_file() or not _ours(path)):
        raise UserInputError(f"--emit-plan {path}: the file exists and was not written by advisor",
                             "choose a new file name, or remove that file first")


def write_plan_module(path: Path, actions: Sequence[str], mode: str, summary: str) -> Path:
    path = Path(path)
    check_plan_path(path)
    # The summary lands in a docstring: printable characters only, no backslash, no closing quotes.
    safe = "".join(c for c in summary if c.isprintable()).replace("\\", "/").replace('"""', "'''")
    write_text_atomic(path, plan_module(actions, mode, safe))
    return path


def _ours(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline().startswith(MARK)
    except OSError:
        return False
