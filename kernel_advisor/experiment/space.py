"""The configurations worth measuring, in the order an expert would try them.

Singles first: each recommended action alone, each compile mode alone, channels_last where
the model holds 4-D weights, each bundled kernel the advice names. Then combinations built
from what the singles showed: the library actions that measured faster stacked (the base),
the base and channels_last under each compile mode that passed alone, and the kernels inside
the best compile mode as the operators they are.
"""
from __future__ import annotations

import itertools
from typing import Iterable, Mapping, Sequence

import torch

from kernel_advisor.actions import NONE, get_action, is_known
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.experiment.trial import Outcome
from kernel_advisor.experiment.variant import Config, conflicts, make_config

CHANNELS_LAST = "channels_last"
COMPILE_MODES_CPU = ("compile", "compile:max-autotune-no-cudagraphs")
COMPILE_MODES_CUDA = ("compile", "compile:max-autotune-no-cudagraphs", "compile:reduce-overhead")


def compile_modes(device_type: str, named: Iterable[str], modes: Sequence[str] | None = None) -> list[str]:
    """The compile modes searched (`modes`, or every mode of the device when None), and the
    compile-stage actions the advice named (float8:compile)."""
    base = list(modes if modes is not None else COMPILE_MODES_CUDA if device_type == "cuda" else COMPILE_MODES_CPU)
    return base + [n for n in named if get_action(n).stage == "compile" and n not in base]


def has_4d_weights(loaded: LoadedModel) -> bool:
    model = loaded.model
    return isinstance(model, torch.nn.Module) and any(p.dim() == 4 for p in model.parameters())


def singles(loaded: LoadedModel, names: Sequence[str], modes: Sequence[str] | None = None) -> list[Config]:
    """Each named action alone, each compile mode alone, channels_last where it can apply."""
    named = [n for n in dict.fromkeys(names) if n != NONE and is_known(n)]
    below = [n for n in named if get_action(n).stage != "compile"]
    if has_4d_weights(loaded) and CHANNELS_LAST not in below:
        below.append(CHANNELS_LAST)
    tops = compile_modes(loaded.device.type, named, modes)
    return _unique([make_config([n]) for n in below] + [Config((), c) for c in tops])


def combinations(singles_out: Mapping[Config, Outcome], loaded: LoadedModel) -> list[Config]:
    """Configurations of several parts, from the singles' measurements."""
    faster = _faster(singles_out)
    base = _base([c.actions[0] for c in faster if c.actions and not c.compile and not c.kernels])
    kernels = [c.actions[0] for c in singles_out if len(c.actions) == 1 and c.kernels]
    tops = [c.compile for c in _passed(singles_out) if c.compile and not c.actions]
    layouts = [[], base] + ([[CHANNELS_LAST], base + [CHANNELS_LAST]] if has_4d_weights(loaded) else [])
    out = [make_config(base)] if len(base) > 1 else []
    for layout, top in itertools.product(layouts, tops):
        out += _maybe(list(layout) + [top])
    best_top = next((c.compile for c in faster if c.compile and not c.actions), "")
    for k in kernels:
        out += _maybe(base + [k]) + (_maybe([k, best_top]) if best_top else [])
    if best_top and len(kernels) > 1:
        out += _maybe(kernels + [best_top])
    seen = set(singles_out)
    return [c for c in _unique(out) if c not in seen and c.parts]


def _base(names: Sequence[str]) -> list[str]:
    """The faster library actions (best first) that stack without conflict."""
    chosen: list[str] = []
    for n in names:
        if not any(conflicts(get_action(n), get_action(m)) for m in chosen):
            chosen.append(n)
    return chosen


def _maybe(parts: Sequence[str]) -> list[Config]:
    try:
        return [make_config(parts)]
    except ValueError:
        return []


def _passed(outcomes: Mapping[Config, Outcome]) -> list[Config]:
    return [c for c, o in outcomes.items() if o.status == "passed"]


def _faster(outcomes: Mapping[Config, Outcome]) -> list[Config]:
    """Configurations measured faster than eager, largest gain first."""
    fast = [c for c, o in outcomes.items() if o.status == "passed" and o.verdict == "faster"]
    return sorted(fast, key=lambda c: -(outcomes[c].gain_frac or 0.0))


def _unique(configs: Iterable[Config]) -> list[Config]:
    return list(dict.fromkeys(configs))
