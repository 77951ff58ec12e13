"""Measure actions in the user's real model: gate each against eager, time them interleaved.

`measure_actions` takes the loaded model (the run's device, dtype, mode) and action names
in the caller's order of preference: when the budget runs short, the last ones give way.
Then the plan (plan.py) is measured the same way against a fresh eager baseline. Every
outcome is a record (outcome.py); nothing is raised for an action that fails.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from kernel_advisor.actions import NONE, get_action, is_known
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.measure.outcome import Outcome
from kernel_advisor.measure.plan import choose, left_out_note, prepare_best_plan
from kernel_advisor.measure.trials import (Deadline, Progress, Trial, close_all, prepare_trial, run_gate,
                                           time_trials)
from kernel_advisor.trykernel.reference import prepare_reference
from kernel_advisor.trykernel.timing import Estimate

CUDA_REPS, CPU_REPS = 30, 10


@dataclass(frozen=True)
class MeasureOptions:
    draws: int = 2  # fresh input draws the gate checks
    reps: int = 0  # interleaved rounds; 0 picks by device (CUDA_REPS / CPU_REPS)
    warmup: int = 3
    budget_s: float | None = None
    seed: int = 0


@dataclass(frozen=True)
class PlanResult:
    actions: tuple[str, ...]
    outcome: Outcome


@dataclass(frozen=True)
class Measured:
    outcomes: dict[str, Outcome]  # by action name
    plan: PlanResult  # no actions (status not-applied) when none measured faster
    eager_step_s: Estimate | None
    reference: str  # how the gate's reference was computed
    timing: str  # how steps were timed

    def to_json(self) -> dict:
        return {"eager_step_s": _interval(self.eager_step_s), "reference": self.reference, "timing": self.timing}


def timing_label(loaded: LoadedModel) -> str:
    if loaded.device.type == "cuda":
        return "CUDA events around each step, L2 flushed, interleaved with eager"
    return "time.perf_counter around each step, interleaved with eager (CPU: says nothing about a GPU)"


def measure_actions(loaded: LoadedModel, mode: str, names: Sequence[str], options: MeasureOptions = MeasureOptions(),
                    progress: Progress | None = None) -> Measured:
    report = progress or (lambda label, done, total: None)
    deadline = Deadline(options.budget_s)
    reference = prepare_reference(loaded, mode)
    trials = [prepare_trial(loaded, mode, name) for name in dict.fromkeys(names)]
    try:
        eager = _gate_and_time(loaded, mode, trials, reference, options, deadline, report)
    finally:
        close_all(trials)  # the plan compiles afresh: no single's compiled code may linger
    outcomes = {t.name: t.outcome for t in trials}
    plan = _measure_plan(loaded, mode, outcomes, reference, options, deadline, report)
    return Measured(outcomes, plan, eager, reference.reason, timing_label(loaded))


def _gate_and_time(loaded, mode, trials: list[Trial], reference, options: MeasureOptions, deadline: Deadline,
                   report: Progress) -> Estimate | None:
    """Gate, then time, the quick-to-prepare trials; then the slow ones (max-autotune) with what
    is left of the budget, each batch interleaved with its own eager steps."""
    eager = None
    reps = options.reps or (CUDA_REPS if loaded.device.type == "cuda" else CPU_REPS)
    for batch in _by_preparation_cost(trials):
        step_s = run_gate(loaded, mode, batch, reference, options.draws, options.seed, deadline, report)
        report("timing", 0, 1)
        eager = time_trials(loaded, mode, batch, reps, options.warmup, step_s, deadline) or eager
        report("timing", 1, 1)
    return eager


def _by_preparation_cost(trials: list[Trial]) -> list[list[Trial]]:
    def slow(t: Trial) -> bool:  # the plan's trial is named "plan", not an action
        return t.name != NONE and is_known(t.name) and get_action(t.name).slow_to_prepare

    return [b for b in ([t for t in trials if not slow(t)], [t for t in trials if slow(t)]) if b]


def _measure_plan(loaded, mode, outcomes: dict[str, Outcome], reference, options: MeasureOptions,
                  deadline: Deadline, report: Progress) -> PlanResult:
    first = choose(outcomes)
    if len(first) > 1 and deadline.remaining_s() <= 0:
        return PlanResult(tuple(first), deadline.out_of_time())
    prepared = prepare_best_plan(loaded, mode, outcomes)
    names, trial = tuple(prepared.names), prepared.trial
    if not names:
        return PlanResult((), Outcome("not-applied", "no action measured faster than eager: nothing to combine"))
    if trial is None:  # one action: its own measurement is the plan's
        return PlanResult(names, _noted(outcomes[names[0]], prepared.left_out))
    try:
        if trial.pending:
            _gate_and_time(loaded, mode, [trial], reference, options, deadline,
                           lambda label, done, total: report(f"plan: {label}", done, total))
    finally:
        close_all([trial])
    return PlanResult(names, _noted(trial.outcome, prepared.left_out))


def _noted(outcome: Outcome, left_out: dict[str, str]) -> Outcome:
    return outcome.with_note(left_out_note(left_out)) if left_out else outcome


def _interval(e: Estimate | None) -> dict | None:
    return None if e is None else {"value": e.value, "low": e.low, "high": e.high}
