"""The plan: the best non-conflicting actions that measured faster, stacked in ladder order.

Chosen greedily by measured gain, modes of one rung as modes.py credits them. Two actions
conflict when they share an exclusive group (two compile modes, two precisions) or one
excludes the other's group (a bundled kernel's launcher is opaque to torch.compile). The plan is then prepared afresh, each
action on the model as the earlier ones left it, and gated and timed like any action; one
that does not stack on the others is left out and the choice made again without it.
"""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Collection, Mapping, Sequence

from kernel_advisor.actions import Action, NotApplicable, NotMeasurable, Variant, get_action, stacked
from kernel_advisor.actions.base import STAGES
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.measure.modes import passed_over
from kernel_advisor.measure.outcome import Outcome
from kernel_advisor.measure.trials import Trial
from kernel_advisor.measure.gating import first_line

PLAN = "plan"


def choose(outcomes: Mapping[str, Outcome], left_out: Collection[str] = ()) -> list[str]:
    """Actions for the plan: measured faster, best gain first, no conflicts, no mode that a
    sibling mode beat or tied (modes.py), none of `left_out`; in ladder order."""
    dropped = passed_over(outcomes) | set(left_out)
    faster = [name for name, o in outcomes.items()
              if o.status == "passed" and o.verdict == "faster" and name not in dropped]
    faster.sort(key=lambda name: -(outcomes[name].gain_frac or 0.0))
    chosen: list[Action] = []
    for name in faster:
        action = get_action(name)
        if not any(conflicts(action, other) for other in chosen):
            chosen.append(action)
    chosen.sort(key=lambda a: STAGES.index(a.stage))  # stable: equal stages keep gain order
    return [a.name for a in chosen]


def conflicts(a: Action, b: Action) -> bool:
    if a.exclusive and a.exclusive == b.exclusive:
        return True
    return (bool(b.exclusive) and b.exclusive in a.excludes) or (bool(a.exclusive) and a.exclusive in b.excludes)


@dataclasses.dataclass
class PreparedPlan:
    names: list[str]
    trial: Trial | None  # None when one action or none is left: its own measurement is the plan's
    left_out: dict[str, str]  # action -> why it could not be stacked on the others


def prepare_best_plan(loaded: LoadedModel, mode: str, outcomes: Mapping[str, Outcome]) -> PreparedPlan:
    """choose(), then stack; an action that does not stack on the others (float8's module copies
    over another action's swapped forwards) is left out and the choice made again without it, so
    the next best of its group (another compile mode) can take its place."""
    left_out: dict[str, str] = {}
    while True:
        names = choose(outcomes, left_out)
        if len(names) <= 1:
            return PreparedPlan(names, None, left_out)
        trial, failed = _stack(loaded, mode, names)
        if failed is None:
            return PreparedPlan(names, trial, left_out)
        left_out[failed] = trial.outcome.reason


def left_out_note(left_out: Mapping[str, str]) -> str:
    return "; ".join(f"{name} left out: {why}" for name, why in left_out.items())


def _stack(loaded: LoadedModel, mode: str, names: Sequence[str]) -> tuple[Trial, str | None]:
    """(the stacked trial, None), or (a trial with the error, the action that would not stack);
    each action prepared with the earlier ones' contexts entered."""
    variants: list[Variant] = []
    current = loaded
    try:
        for name in names:
            with contextlib.ExitStack() as stack:
                for v in variants:
                    stack.enter_context(v.context())
                variant = get_action(name).prepare(current, mode)
            variants.append(variant)
            current = dataclasses.replace(current, model=variant.model)
    except (NotApplicable, NotMeasurable) as e:
        return _failed(variants, Outcome("error", f"does not apply on top of {_earlier(names, name)}: {e}")), name
    except Exception as e:  # noqa: BLE001 - the combination is what failed: report it, keep the singles
        return _failed(variants, Outcome("error", f"fails on top of {_earlier(names, name)}: {first_line(e)}")), name
    plan = stacked(variants)
    plan.closers.extend(v.close for v in variants)
    return Trial(PLAN, variant=dataclasses.replace(plan, action=PLAN)), None


def _earlier(names: Sequence[str], name: str) -> str:
    return " + ".join(names[:names.index(name)]) or "the model"


def _failed(variants: list[Variant], outcome: Outcome) -> Trial:
    for v in variants:
        v.close()
    return Trial(PLAN, outcome=outcome)
