"""Modes of one rung measured side by side, and which one a recommendation is credited with.

An action's `refinements` (compile's CUDA-graph mode) are measured beside it on CUDA. A
recommendation naming the action is credited with a refinement only when that measured clearly
faster (95 % intervals apart); a tie stays with the action the rule named, the cheaper mode.
"""
from __future__ import annotations

from typing import Mapping

from kernel_advisor.actions import NONE, get_action
from kernel_advisor.experiment.trial import Outcome


def credited(name: str, outcomes: Mapping[str, Outcome]) -> str:
    """`name`, or the refinement of it that measured clearly faster than it."""
    if name == NONE or name not in outcomes:
        return name
    best = name
    for r in get_action(name).refinements:
        if _clearly_faster(outcomes.get(r), outcomes[best]):
            best = r
    return best


def credit_note(name: str, chosen: str, outcomes: Mapping[str, Outcome]) -> str:
    """Why a recommendation naming `name` carries `chosen`'s measurement, e.g. "measured as
    compile:reduce-overhead: 1.41× [1.38–1.44], against compile's 0.98× [0.95–1.01]"."""
    return (f"measured as {chosen}: {_speedup(outcomes[chosen])}, "
            f"against {name}'s {_speedup(outcomes[name])}")


def _clearly_faster(a: Outcome | None, b: Outcome) -> bool:
    if a is None or a.status != "passed" or a.verdict != "faster" or a.speedup is None:
        return False
    if b.status != "passed" or b.verdict != "faster" or b.speedup is None:
        return True
    return a.speedup.low > b.speedup.high


def _speedup(o: Outcome) -> str:
    if o.speedup is None:
        return o.status if o.status != "passed" else "untimed"
    s = o.speedup
    return f"{s.value:.3g}× [{s.low:.3g}–{s.high:.3g}]"
