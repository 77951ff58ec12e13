"""One configuration on trial: prepared, gated against eager on fresh draws, then timed.

A Trial ends with an Outcome. It ends early, untimed, when the configuration does not apply,
cannot run here, raises, fails the gate, routes no call, or does not fit the budget. A
compile (on the first gated call) runs under an alarm set to what is left of the budget:
one that would overrun it is stopped and reported as such.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from kernel_advisor.actions import NotApplicable, NotMeasurable, Variant
from kernel_advisor.collect.interrupts import OutOfTime, alarm_after
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.loop_timing import Estimate
from kernel_advisor.experiment.budget import Budget
from kernel_advisor.experiment.gate import gate_variant, synchronize
from kernel_advisor.experiment.variant import Config, prepare_config
from kernel_advisor.trykernel.capture import GateDraws, GateRecord, first_line

Progress = Callable[[str, int, int], None]


@dataclass(eq=False)
class Trial:
    config: Config
    phase: str  # which part of the search proposed it ("single", "combination", ...)
    variant: Variant | None = None
    outcome: Outcome | None = None  # set as soon as the trial is decided
    gate: GateRecord = field(default_factory=GateRecord)
    prepare_s: float = 0.0  # preparing plus the first (compiling) call
    windows: int = 0  # windows timed in all
    pruned: str = ""  # why the search stopped timing it ("" when it went on)

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def pending(self) -> bool:
        return self.outcome is None

    def close(self) -> None:
        if self.variant is not None:
            self.variant.close()
            self.variant = None


def prepare_trial(loaded: LoadedModel, mode: str, config: Config, phase: str,
                  busy_frac: float | None) -> Trial:
    t0 = time.perf_counter()
    trial = Trial(config, phase)
    try:
        trial.variant = prepare_config(loaded, mode, config, busy_frac)
    except NotApplicable as e:
        trial.outcome = Outcome("not-applied", str(e))
    except NotMeasurable as e:
        trial.outcome = Outcome("not-measurable", str(e))
    except Exception as e:  # noqa: BLE001 - a configuration that cannot transform this model is a result
        trial.outcome = Outcome("error", f"could not apply: {first_line(e)}")
    trial.prepare_s = time.perf_counter() - t0
    return trial


def gate_trials(loaded: LoadedModel, mode: str, trials: Sequence[Trial], draws: GateDraws, budget: Budget,
                progress: Progress) -> None:
    """Gate every pending trial on every draw.

    The first draw is where a compiled variant compiles: its time is learnt by the budget, and
    an alarm stops it when it would run past the budget.
    """
    for d in range(draws.count):
        inputs, base, ref = draws[d]
        for i, t in enumerate(trials):
            if t.pending:
                _gate_one(loaded, mode, t, inputs, base, ref, budget, first=d == 0)
            progress(f"correctness gate, draw {d + 1}/{draws.count}", i + 1, len(trials))
    for t in trials:
        if t.pending:
            t.outcome = _gate_verdict(t)


def _gate_one(loaded, mode, t: Trial, inputs, base, ref, budget: Budget, first: bool) -> None:
    t0 = time.perf_counter()
    if budget.exploring_left_s() <= 0:
        t.outcome = Outcome("not-measurable", f"skipped: the exploring time of the --budget-s {budget.budget_s:g} "
                                              "ran out before its gate")
        return
    try:
        with alarm_after(budget.exploring_left_s()):
            gate_variant(loaded, t.variant, inputs, base, ref, mode, t.gate)
            synchronize(loaded.device)
    except OutOfTime:
        t.outcome = Outcome("not-measurable", f"stopped after {time.perf_counter() - t0:.0f} s: preparing it "
                                              f"(compiling) would have run past the --budget-s of {budget.budget_s:g} s")
        budget.learn_compile(t.config.compile, time.perf_counter() - t0)
        # Dropped, not closed: closing resets Dynamo, which would make every other compiled variant recompile.
        t.variant = None
        return
    if first:
        t.prepare_s += time.perf_counter() - t0
        budget.learn_compile(t.config.compile, t.prepare_s)


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


# ------------------------------------------------------------
# What measuring one action (or the plan) found, in the form recommendations.json stores.

STATUSES = ("passed", "failed-gate", "not-applied", "not-measurable", "error")


@dataclass(frozen=True)
class Outcome:
    status: str  # one of STATUSES
    reason: str = ""  # why it is not "passed", or a note on how it passed (reference used)
    applied: str = ""  # what the action changed, for people
    speedup: Estimate | None = None  # eager step / variant step, ratio of medians, 95 % interval
    gain_frac: float | None = None  # 1 - variant / eager: the share of the step it saves
    verdict: str = ""  # "faster", "slower", "no measurable difference", "" when untimed
    step_s: Estimate | None = None
    gate: dict | None = None  # the worst errors the gate saw

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "applied": self.applied,
                "speedup": _interval(self.speedup), "gain_frac": _finite(self.gain_frac),
                "verdict": self.verdict, "step_s": _interval(self.step_s), "gate": self.gate}

    def with_note(self, note: str) -> "Outcome":
        """The same outcome, `note` put before its reason."""
        return replace(self, reason=f"{note}; {self.reason}" if self.reason else note)

    @property
    def measured_gain(self) -> float | None:
        """The saving to rank by: only a verdict of "faster" counts as a gain."""
        return self.gain_frac if self.status == "passed" and self.verdict else None


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _interval(e: Estimate | None) -> dict | None:
    if e is None:
        return None
    return {"value": _finite(e.value), "low": _finite(e.low), "high": _finite(e.high)}
