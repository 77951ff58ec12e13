"""Actions: named, reversible transformations a recommendation can apply to the user's model.

The registry is code: each action a prepare function and an Action record, grouped by what
they change (flags.py: backend switches; precision.py: number formats and torch.compile;
module_rewrites.py: the model's modules, weights and layout, and bundled kernels; sdpa.py:
attention; data_parallel.py: DDP and FSDP2 options). Rules name an action (`action: sdpa`);
`advisor recommend --measure` prepares it on the real model, gates it and times it.
`kernel:<id>` names a bundled kernel; `kernel:auto` the one the recommendation found.
"""
from __future__ import annotations

from kernel_advisor.actions import data_parallel, flags, module_rewrites, precision, sdpa
from kernel_advisor.actions.base import Action, NotApplicable, NotMeasurable, Variant, stacked

NONE = "none"
_FIXED: dict[str, Action] = {a.name: a for a in (
    sdpa.SDPA, *sdpa.BACKEND_ACTIONS, module_rewrites.RMS_NORM_MODULE, module_rewrites.CHANNELS_LAST,
    flags.CUDNN_BENCHMARK, flags.TF32, precision.BF16_AUTOCAST, module_rewrites.PAD_GEMM, precision.FLOAT8,
    *precision.ACTIONS, precision.FLOAT8_COMPILED, *data_parallel.ACTIONS)}


def action_names() -> tuple[str, ...]:
    """Every name a rule may give, besides `kernel:<id>` and `none`."""
    return tuple(_FIXED)


def is_known(name: str) -> bool:
    return name == NONE or name in _FIXED or (name.startswith(module_rewrites.PREFIX) and len(name) > len(module_rewrites.PREFIX))


def get_action(name: str) -> Action:
    """The action called `name`; KeyError names the known ones."""
    if name in _FIXED:
        return _FIXED[name]
    if name.startswith(module_rewrites.PREFIX) and name != module_rewrites.PREFIX + "auto":
        return module_rewrites.action_for(name)
    raise KeyError(f"unknown action {name!r}; known: {', '.join(action_names())}, kernel:<id>, none")


def fixed_by(name: str) -> frozenset[str]:
    """The actions whose recommendations `name` carries out: itself and what it also fixes."""
    if name == NONE or not is_known(name):
        return frozenset({name})
    return frozenset({name, *get_action(name).also_fixes})


def is_distributed(name: str) -> bool:
    """Measured on a distributed run's ranks (actions/data_parallel.py), not in one process."""
    return name in _FIXED and _FIXED[name].distributed


def effort(name: str) -> int:
    """How much an action asks of the user within its rung: 0 for a global flag, else 1."""
    return get_action(name).effort if name != NONE and is_known(name) else 1


__all__ = ["Action", "NONE", "NotApplicable", "NotMeasurable", "Variant", "action_names", "effort", "fixed_by",
           "get_action",
           "is_distributed", "is_known", "stacked"]
