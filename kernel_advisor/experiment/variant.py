"""A configuration: actions composed on the model, a compile mode on top; and how it is prepared.

Library actions (module swaps, layout, precision, flags) are prepared in ladder order, each
on the model as the earlier ones left it and with their contexts entered. Bundled kernels
come next: in eager through the aten override (actions/module_rewrites.py); under torch.compile as the
torch.library operators they are, installed the way Dynamo traces (trykernel/compiled.py), so
the compiled graph calls them. The compile action wraps whatever the others made.
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import torch

from kernel_advisor.actions import NotApplicable, Variant, get_action, module_rewrites, stacked
from kernel_advisor.actions.base import STAGES, Action
from kernel_advisor.collect.in_memory import loaded_from_module
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.rundir import write_text_atomic
from kernel_advisor.collect.user_code import tensor_leaves
from kernel_advisor.errors import UserInputError
from kernel_advisor.trykernel import compiled as kernel_compiled

EAGER = "eager"


@dataclass(frozen=True, order=True)
class Config:
    """What one variant applies: `actions` below compile (ladder order), `compile` on top ("" for none)."""

    actions: tuple[str, ...] = ()
    compile: str = ""

    @property
    def parts(self) -> tuple[str, ...]:
        return self.actions + ((self.compile,) if self.compile else ())

    @property
    def name(self) -> str:
        return " + ".join(self.parts) or EAGER

    @property
    def kernels(self) -> tuple[str, ...]:
        return tuple(a for a in self.actions if a.startswith(module_rewrites.PREFIX))

    def to_json(self) -> dict:
        return {"name": self.name, "actions": list(self.actions), "compile": self.compile or None}


def make_config(parts: Sequence[str]) -> Config:
    """The configuration of `parts` in any order: compile-stage actions on top, the rest in ladder order.

    Raises ValueError when two parts conflict (two compile modes, two number formats).
    """
    names = list(dict.fromkeys(parts))
    actions = [get_action(n) for n in names]
    for i, a in enumerate(actions):
        for b in actions[i + 1:]:
            if conflicts(a, b):
                raise ValueError(f"{a.name} and {b.name} cannot be combined")
    top = [a.name for a in actions if a.stage == "compile"]
    below = sorted((a for a in actions if a.stage != "compile"), key=lambda a: STAGES.index(a.stage))
    return Config(tuple(a.name for a in below), top[0] if top else "")


def conflicts(a: Action, b: Action) -> bool:
    """Two actions that one configuration cannot hold: a shared exclusive group (two compile
    modes, two precisions), or one excluding the other's group. Bundled kernels go inside
    compile as operators, so their exclusion of compile does not apply here."""
    if a.exclusive and a.exclusive == b.exclusive:
        return True
    kernel = a.name.startswith(module_rewrites.PREFIX) or b.name.startswith(module_rewrites.PREFIX)
    if kernel:
        return False
    return (bool(b.exclusive) and b.exclusive in a.excludes) or (bool(a.exclusive) and a.exclusive in b.excludes)


def prepare_config(loaded: LoadedModel, mode: str, config: Config, busy_frac: float | None = None) -> Variant:
    """The prepared variant of `config`; NotApplicable / NotMeasurable / anything the model raises
    propagate, naming the part that failed when there are several."""
    variants: list[Variant] = []
    current = loaded
    try:
        for name in config.actions:
            if name.startswith(module_rewrites.PREFIX):
                continue
            variants.append(_prepare_on(current, mode, variants, get_action(name)))
            current = dataclasses.replace(current, model=variants[-1].model)
        if config.kernels:
            variants.append(_kernels(current, mode, config, busy_frac))
        if config.compile:
            variants.append(_prepare_on(current, mode, variants, get_action(config.compile)))
    except BaseException:
        for v in variants:
            v.close()
        raise
    if not variants:
        raise NotApplicable("nothing to apply")
    v = variants[0] if len(variants) == 1 else stacked(variants)
    if len(variants) > 1:
        v.closers.extend(x.close for x in variants)
        owner = next((x.params_of for x in reversed(variants) if x.params_of is not None), None)
        v = dataclasses.replace(v, params_of=owner, counters=_counters(variants))
    return dataclasses.replace(v, action=config.name)


def _prepare_on(loaded: LoadedModel, mode: str, earlier: Sequence[Variant], action: Action) -> Variant:
    with contextlib.ExitStack() as stack:
        for v in earlier:
            stack.enter_context(v.context())
        return action.prepare(loaded, mode)


def _kernels(loaded: LoadedModel, mode: str, config: Config, busy_frac: float | None) -> Variant:
    if not config.compile:
        if len(config.kernels) == 1:
            return module_rewrites.prepare(config.kernels[0], loaded, mode, busy_frac)
        return stacked([module_rewrites.prepare(k, loaded, mode, busy_frac) for k in config.kernels])
    cands = [module_rewrites.candidate(k, loaded, busy_frac) for k in config.kernels]
    problems = [p for p in (kernel_compiled.compile_problem(c) for c in cands) if p]
    if problems:
        raise NotApplicable(problems[0])
    activate = kernel_compiled.installer(cands)
    tolerances = [c.tolerance for c in cands]

    def tolerance(dtype):
        tols = [t(dtype) for t in tolerances]
        return max(t[0] for t in tols), max(t[1] for t in tols)

    return Variant(" + ".join(config.kernels), loaded.model, ", ".join(c.id for c in cands) + " (traced)",
                   context=activate, tolerance=tolerance, stage="kernel")


def _counters(variants: Sequence[Variant]):
    counted = [v.counters for v in variants if v.counters is not None]
    if not counted:
        return None

    def counters() -> tuple[int, int]:
        pairs = [c() for c in counted]
        return min(p[0] for p in pairs), sum(p[1] for p in pairs)

    return counters


# ------------------------------------------------------------
# The plan as code: `--emit-plan` writes a module calling `apply_plan`, which applies the
# measured plan to a model in the user's own script through the same action code.
#
#     model = apply_plan(model, example_inputs, ("channels_last", "compile:max-autotune-no-cudagraphs"))
#
# The result is an nn.Module: calling it runs the configuration's model under its contexts
# (flags, substitutions) with its input conversion (channels_last), exactly as `--measure`
# timed it; its parameters are the ones the configuration trains (a copy, for channels_last).

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
# The module holds the plan's action names and calls `apply_plan` (above), so the script
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
from kernel_advisor.experiment.variant import apply_plan as _apply_plan

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
