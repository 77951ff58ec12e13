"""One action on trial: prepared, gated against eager, timed interleaved with it.

A Trial ends with an Outcome. It ends early, untimed, when the action does not apply,
cannot run here, raises, fails the gate, routes no call, or the budget ran out.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, Sequence

from kernel_advisor.actions import NotApplicable, NotMeasurable, Variant, get_action
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.runner import make_step
from kernel_advisor.measure.gating import GateRecord, first_line, gate_variant, synchronize
from kernel_advisor.measure.outcome import Outcome
from kernel_advisor.trykernel.capture import capture_step
from kernel_advisor.trykernel.timing import Estimate, TimedVariant, interleaved_times_s, median_ci, speedup_ci, verdict

EAGER = "eager"
MIN_REPS = 5
Progress = Callable[[str, int, int], None]


class Deadline:
    """Wall-clock budget of one measurement; None means no limit."""

    def __init__(self, budget_s: float | None) -> None:
        self.budget_s = budget_s
        self._end = None if budget_s is None else time.monotonic() + budget_s

    def remaining_s(self) -> float:
        return float("inf") if self._end is None else max(0.0, self._end - time.monotonic())

    def out_of_time(self) -> Outcome:
        return Outcome("not-measurable", f"not measured: the --budget-s of {self.budget_s:g} s ran out")


@dataclass
class Trial:
    name: str  # the action (or "plan")
    variant: Variant | None = None
    outcome: Outcome | None = None  # set as soon as the trial is decided
    gate: GateRecord = field(default_factory=GateRecord)

    @property
    def pending(self) -> bool:
        return self.outcome is None


def prepare_trial(loaded: LoadedModel, mode: str, name: str) -> Trial:
    try:
        return Trial(name, variant=get_action(name).prepare(loaded, mode))
    except NotApplicable as e:
        return Trial(name, outcome=Outcome("not-applied", str(e)))
    except NotMeasurable as e:
        return Trial(name, outcome=Outcome("not-measurable", str(e)))
    except Exception as e:  # noqa: BLE001 - an action that cannot transform this model is a result
        return Trial(name, outcome=Outcome("error", f"could not apply: {first_line(e)}"))


def run_gate(loaded: LoadedModel, mode: str, trials: Sequence[Trial], reference, draws: int, seed: int,
             deadline: Deadline, progress: Progress) -> float:
    """Gate every pending trial on `draws` fresh draws; returns eager's step time seen (s)."""
    eager_s = []
    for d in range(draws):
        inputs = loaded.make_inputs(seed + 1 + d)
        t0 = time.perf_counter()
        base = capture_step(loaded, loaded.model, loaded.model, inputs, mode)
        synchronize(loaded.device)
        eager_s.append(time.perf_counter() - t0)
        ref = reference.capture(loaded, inputs, mode)
        for i, t in enumerate(trials):
            if t.pending and deadline.remaining_s() <= 0:
                t.outcome = deadline.out_of_time()
            if t.pending:
                gate_variant(loaded, t.variant, inputs, base, ref, mode, t.gate)
            progress(f"correctness gate, draw {d + 1}/{draws}", i + 1, len(trials))
    for t in trials:
        if t.pending:
            t.outcome = _gate_verdict(t)
    return min(eager_s)


def _gate_verdict(t: Trial) -> Outcome | None:
    """None when the trial passed the gate and goes on to timing."""
    v = t.variant
    if t.gate.error:
        return Outcome("error", f"the model failed with {v.applied}: {t.gate.error}", v.applied)
    if v.counters is not None:
        routed, fell_back = v.counters()
        if routed == 0:
            why = f"every call fell back ({fell_back})" if fell_back else "the model never reached it"
            return Outcome("not-applied", why, v.applied)
    if t.gate.problem:
        return Outcome("failed-gate", t.gate.problem, v.applied, gate=t.gate.worst())
    return None


def timed_step(loaded: LoadedModel, mode: str, v: Variant | None):
    if v is None:
        return TimedVariant(EAGER, nullcontext, make_step(loaded, mode))
    inputs = v.convert_inputs(loaded.inputs)
    return TimedVariant(v.action, v.context, make_step(dataclasses.replace(loaded, model=v.model, inputs=inputs),
                                                       mode))


def time_trials(loaded: LoadedModel, mode: str, trials: Sequence[Trial], reps: int, warmup: int,
                step_estimate_s: float, deadline: Deadline) -> Estimate | None:
    """Time the trials that passed the gate, interleaved with eager, within the budget.

    Returns eager's step time, None when nothing was timed.
    """
    passed = [t for t in trials if t.pending]
    while passed and _cost_s(len(passed), reps, warmup, step_estimate_s) > deadline.remaining_s():
        fit = int(deadline.remaining_s() / (step_estimate_s * (len(passed) + 1))) - warmup
        if fit >= MIN_REPS:
            reps = fit
            break
        passed.pop().outcome = deadline.out_of_time()  # the lowest-ranked trial gives way first
    if not passed:
        return None
    timed = [timed_step(loaded, mode, None)] + [timed_step(loaded, mode, t.variant) for t in passed]
    times = interleaved_times_s(timed, reps, warmup, loaded.device)
    eager = times[EAGER]
    for t in passed:
        mine = times[t.variant.action]
        speed = speedup_ci(eager, mine)
        t.outcome = Outcome("passed", "", t.variant.applied, speedup=speed,
                            gain_frac=1.0 - statistics.median(mine) / statistics.median(eager),
                            verdict=verdict(speed), step_s=median_ci(mine), gate=t.gate.worst())
    return median_ci(eager)


def _cost_s(n_variants: int, reps: int, warmup: int, step_s: float) -> float:
    # NB: compiled variants are assumed to step no slower than eager; the gate already paid compile time.
    return (n_variants + 1) * (reps + warmup) * step_s


def close_all(trials: Sequence[Trial]) -> None:
    for t in trials:
        if t.variant is not None:
            t.variant.close()
