"""One configuration on trial: prepared, gated against eager on fresh draws, then timed.

A Trial ends with an Outcome. It ends early, untimed, when the configuration does not apply,
cannot run here, raises, fails the gate, routes no call, or does not fit the budget. A
compile (on the first gated call) runs under an alarm set to what is left of the budget:
one that would overrun it is stopped and reported as such.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import torch
import torch.nn as nn

from kernel_advisor.actions import NotApplicable, NotMeasurable, Variant
from kernel_advisor.actions.base import Tolerance
from kernel_advisor.actions.flags import TF32_TOLERANCE
from kernel_advisor.collect.interrupts import OutOfTime, alarm_after
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.loop_timing import Estimate
from kernel_advisor.experiment.variant import Config, prepare_config
from kernel_advisor.trykernel.candidates import default_tolerance
from kernel_advisor.trykernel.capture import Captured, GateDraws, GateRecord, capture_step, first_line, gate_draw

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


# ------------------------------------------------------------
# The correctness gate for prepared actions: every variant against eager on fresh input draws.
#
# The gate try-kernel uses too (trykernel/capture.py drives it, trykernel/gate.py compares): every output leaf and, in train mode,
# every parameter gradient, against eager at the run's dtype and against the reference
# (float64 where memory allows, trykernel/reference.py). A variant's first call is where
# torch.compile compiles, so compile time is spent here and never inside the timing.
#
# Tolerances: the variant's own (actions that change numerics on purpose state one), else the
# kernel default for the leaf's dtype. One rule loosens them: see `tf32_conv_tolerance`.

TF32_CONV_NOTE = (f"float32 leaves held to TF32's {TF32_TOLERANCE[0]:g}: the model runs float32 convolutions "
                  "on CUDA with cudnn.allow_tf32 on, and cuDNN may pick a TF32 algorithm for the variant "
                  "and not for eager")


def gate_variant(loaded: LoadedModel, v: Variant, inputs: list, base: Captured, ref: Captured | None,
                 mode: str, record: GateRecord) -> None:
    """One draw of one variant; a variant that raises is recorded, never re-raised."""
    def run():
        with v.context():
            got = capture_step(loaded, v.model, v.params_of or loaded.model, v.convert_inputs(inputs), mode)
            # read inside the context: the variant itself may switch TF32 or autocast on
            tolerance, record.tolerance = tf32_conv_tolerance(
                v.tolerance or default_tolerance, loaded.device.type, torch.backends.cudnn.allow_tf32,
                _float32_convolutions(v.model, loaded))
        return _like(got, base), tolerance
    gate_draw(record, run, base, ref)


def tf32_conv_tolerance(tolerance: Tolerance, device_type: str, cudnn_allow_tf32: bool,
                        float32_convolutions: bool) -> tuple[Tolerance, str]:
    """The tolerance a variant is gated with, and the note stating it ("" when unchanged).

    NB: with cudnn.allow_tf32 on (PyTorch's default) cuDNN may run a float32 convolution on
    TF32 tensor cores, choosing the algorithm per layout and shape. Eager may get an exact
    algorithm and the variant (channels_last, a compiled or benchmarked conv) a TF32 one, so
    eager's own distance from the reference no longer bounds the variant's: float32 leaves get
    the tf32 action's tolerance. Other dtypes keep theirs; TF32 touches float32 math only.
    """
    if device_type != "cuda" or not cudnn_allow_tf32 or not float32_convolutions:
        return tolerance, ""

    def loosened(dtype: torch.dtype) -> tuple[float, float]:
        rtol, atol = tolerance(dtype)
        if dtype != torch.float32:
            return rtol, atol
        return max(rtol, TF32_TOLERANCE[0]), max(atol, TF32_TOLERANCE[1])

    return loosened, TF32_CONV_NOTE


def _float32_convolutions(model, loaded: LoadedModel) -> bool:
    """Does the model hold a torch.nn convolution that runs in float32 (no autocast around it)?"""
    if loaded.autocast is not None or torch.is_autocast_enabled(loaded.device.type):
        return False  # autocast runs convolutions in 16 bits
    modules = model.modules() if isinstance(model, nn.Module) else ()
    return any(isinstance(m, nn.modules.conv._ConvNd) and m.weight.dtype == torch.float32 for m in modules)


def _like(got: Captured, base: Captured) -> Captured:
    """The variant's leaves in eager's dtypes: autocast returns bfloat16 where eager gave float32."""
    dtypes = dict((path, t.dtype) for path, t in base.leaves)
    leaves = tuple((path, t.to(dtypes[path]) if path in dtypes and t.is_floating_point()
                    and dtypes[path].is_floating_point else t) for path, t in got.leaves)
    return dataclasses.replace(got, leaves=leaves)


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ------------------------------------------------------------
# The wall-clock budget of one search, and what each piece of work is expected to cost.
#
# A compile cannot be stopped halfway, so a configuration is started only when its expected
# preparation (compile included) and a short timing fit in what is left, beside a reserve for
# the final timing of the best few. Costs are learnt as the search goes: the first compile of
# each kind is measured, and the others expected from it.

# NB: rough multiples of a default-mode compile, seen on an H200 across the advice models
# (max-autotune benchmarks every GEMM and, with no cudagraphs, pointwise/reduction configs).
COMPILE_COST_FACTOR = {"compile": 1.0, "compile:reduce-overhead": 1.2,
                       "compile:max-autotune-no-cudagraphs": 4.0, "float8:compile": 1.5}
# Before any compile was seen its cost is unknown: it is started when this much is left, and the
# alarm (trial.py) stops it at the end of the exploring time if it runs longer.
FIRST_COMPILE_MIN_S = 5.0
FINAL_RESERVE_FRAC = 0.15  # of the budget, kept for timing the finalists long


@dataclass
class Budget:
    """`budget_s` of wall time from now (None: no limit)."""

    budget_s: float | None
    start: float = field(default_factory=time.monotonic)
    compile_s: dict[str, float] = field(default_factory=dict)  # measured preparation + first call, by mode

    @property
    def end(self) -> float:
        return math.inf if self.budget_s is None else self.start + self.budget_s

    def elapsed_s(self) -> float:
        return time.monotonic() - self.start

    def remaining_s(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def exploring_left_s(self) -> float:
        """What exploration may still spend: the reserve for the final timing is not theirs."""
        if self.budget_s is None:
            return math.inf
        return max(0.0, self.remaining_s() - FINAL_RESERVE_FRAC * self.budget_s)

    def expected_compile_s(self, mode: str) -> float:
        if not mode:
            return 0.0
        if mode in self.compile_s:
            return self.compile_s[mode]
        seen = {m: s / COMPILE_COST_FACTOR.get(m, 1.0) for m, s in self.compile_s.items()}
        if not seen:
            return FIRST_COMPILE_MIN_S
        return max(seen.values()) * COMPILE_COST_FACTOR.get(mode, 1.0)

    def learn_compile(self, mode: str, seconds: float) -> None:
        if mode:
            self.compile_s[mode] = max(self.compile_s.get(mode, 0.0), seconds)

    def fits(self, cost_s: float) -> bool:
        return cost_s <= self.exploring_left_s()

    def out_of_time_reason(self, cost_s: float) -> str:
        return (f"skipped: expected to take {cost_s:.0f} s, {self.exploring_left_s():.0f} s of the "
                f"--budget-s {self.budget_s:g} left for exploring")
