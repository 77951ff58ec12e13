"""The run's one step time: a median with a distribution-free interval, and whether steps were steady.

Every command that quotes "the step" (profile, recommend's "% of step", report, compare) reads
`step_time_of(run.json)`: run.json's `step_s` when it has one, else the same estimate worked out
from the step times an older run.json recorded. The estimate is the median of the steps timed
without the profiler when there are any (the real step), else of the profiled steps.

The interval is the order-statistic (binomial) interval of the median: for n sorted times
x(1) ≤ … ≤ x(n), [x(j), x(n+1-j)] holds the true median with probability
1 − 2·P(B ≤ j−1), B ~ Binomial(n, ½), whatever the distribution of step times. The narrowest
such interval with at least CONFIDENCE coverage is used; with fewer than 6 steps even
[min, max] covers less than 95 %, so it is [min, max] and `confidence` says how much it covers.

Pure: no torch, no I/O.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence
from kernel_advisor.records.run import RunMeta

CONFIDENCE = 0.95
# Steady state: the first third of the timed steps may be at most this much slower (median)
# than the last third; above it the timed steps count as more warm-up and are timed again.
DRIFT_RATIO_LIMIT = 1.2
MAX_EXTRA_WARMUP_ROUNDS = 3  # each round re-times `steps` steps; the cap on extra warm-up
MIN_STEPS_FOR_DRIFT = 3  # a third needs a step

SOURCES = ("back-to-back", "unprofiled", "profiled", "trace-span")


@dataclass(frozen=True)
class StepTime:
    """One step's wall time and where it comes from."""

    value_s: float
    low_s: float | None  # None: no interval (one step, or a trace with no step markers)
    high_s: float | None
    # "back-to-back" (the user's loop: windows of steps between two synchronizes), "unprofiled"
    # (synchronized steps), "profiled" (profiler overhead included) or "trace-span"
    source: str
    steps: int  # how many steps it summarises
    confidence: float | None  # coverage of [low_s, high_s]

    def basis(self) -> str:
        """What the figure is, for people: "median of 10 unprofiled steps"."""
        plural = "" if self.steps == 1 else "s"
        if self.source == "back-to-back":
            return f"median of {self.steps} window{plural} of back-to-back steps"
        if self.source == "trace-span":
            return f"whole trace / {self.steps} step{plural} (no step markers)"
        return f"median of {self.steps} {self.source} step{plural}"

    def has_interval(self) -> bool:
        return self.low_s is not None and self.high_s is not None

    def to_json(self) -> dict:
        return {"value": self.value_s, "low": self.low_s, "high": self.high_s, "source": self.source,
                "steps": self.steps, "confidence": self.confidence}

    @classmethod
    def from_json(cls, doc: Any) -> "StepTime | None":
        """run.json's `step_s`, or None when it is missing or not a step time."""
        if not isinstance(doc, Mapping) or not _finite(doc.get("value")) or doc.get("source") not in SOURCES:
            return None
        low, high = doc.get("low"), doc.get("high")
        ok = _finite(low) and _finite(high)
        steps = doc.get("steps")
        conf = doc.get("confidence")
        return cls(float(doc["value"]), float(low) if ok else None, float(high) if ok else None,
                   str(doc["source"]), int(steps) if isinstance(steps, int) and steps > 0 else 1,
                   float(conf) if ok and _finite(conf) else None)


@dataclass(frozen=True)
class Ratio:
    value: float
    low: float | None
    high: float | None

    def to_json(self) -> dict:
        return {"value": self.value, "low": self.low, "high": self.high}

    @classmethod
    def from_json(cls, doc: Any) -> "Ratio | None":
        """The ratio `to_json` wrote; None for anything without a finite value."""
        if not isinstance(doc, Mapping) or not _finite(doc.get("value")):
            return None
        ok = _finite(doc.get("low")) and _finite(doc.get("high"))
        return cls(float(doc["value"]), float(doc["low"]) if ok else None, float(doc["high"]) if ok else None)


@dataclass(frozen=True)
class SteadyState:
    """What the steady-state check found while timing the unprofiled steps."""

    extra_warmup_steps: int  # timed steps discarded as warm-up because they drifted
    first_drift_ratio: float | None  # first third / last third (medians) of the first timed round
    final_drift_ratio: float | None  # the same, of the round that was kept
    steady: bool | None  # None: too few steps to tell

    def to_json(self) -> dict:
        return {"extra_warmup_steps": self.extra_warmup_steps, "first_drift_ratio": self.first_drift_ratio,
                "final_drift_ratio": self.final_drift_ratio, "steady": self.steady,
                "drift_ratio_limit": DRIFT_RATIO_LIMIT}


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _clean(times_s: Sequence[Any] | None) -> list[float]:
    return [float(t) for t in times_s or () if _finite(t)]


def median_s(times_s: Sequence[float]) -> float:
    return float(statistics.median(times_s))


def median_interval_coverage(n: int, j: int) -> float:
    """P(x(j) ≤ true median ≤ x(n+1-j)) for n independent draws: 1 − 2·P(Binomial(n, ½) ≤ j−1)."""
    if n < 1 or j < 1 or 2 * j > n + 1:
        return 0.0
    below = sum(math.comb(n, i) for i in range(j)) / 2.0 ** n
    return max(0.0, 1.0 - 2.0 * below)


def median_interval_s(times_s: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """(low_s, high_s, coverage): the narrowest order-statistic interval of the median with
    coverage ≥ confidence, or [min, max] with its (smaller) coverage when none reaches it."""
    x = sorted(times_s)
    n = len(x)
    if n == 0:
        raise ValueError("no step times")
    j = 1
    while median_interval_coverage(n, j + 1) >= confidence:
        j += 1
    return x[j - 1], x[n - j], median_interval_coverage(n, j)


def median_step_time(times_s: Sequence[float], source: str) -> StepTime:
    """The median of `times_s` with its interval (none from a single step)."""
    value = median_s(times_s)
    if len(times_s) < 2:
        return StepTime(value, None, None, source, len(times_s), None)
    low, high, coverage = median_interval_s(times_s)
    return StepTime(value, low, high, source, len(times_s), coverage)


def step_time_estimate(profiled_s: Sequence[float] | None, unprofiled_s: Sequence[float] | None,
                       loop_s: Sequence[float] | None = None) -> StepTime | None:
    """Median of the back-to-back windows (the user's loop) when they were timed, else of the
    unprofiled (synchronized) steps, else of the profiled ones."""
    loop, unprofiled, profiled = _clean(loop_s), _clean(unprofiled_s), _clean(profiled_s)
    if loop:
        return median_step_time(loop, "back-to-back")
    if unprofiled:
        return median_step_time(unprofiled, "unprofiled")
    if profiled:
        return median_step_time(profiled, "profiled")
    return None


def trace_span_step_time(span_s: float, steps: int) -> StepTime:
    """A trace with no step markers: its whole span shared by the `steps` it is said to hold."""
    return StepTime(span_s / max(steps, 1), None, None, "trace-span", max(steps, 1), None)


def step_time_of(meta: Mapping[str, Any]) -> StepTime | None:
    """run.json's step time; an older run.json without `step_s` gets the same estimate from its
    step lists. None when the run has no step times at all."""
    meta = RunMeta.of(meta)
    recorded = StepTime.from_json(meta.step_s)
    if recorded is not None:
        return recorded
    return step_time_estimate(meta.step_wall_s, meta.unprofiled_step_wall_s, meta.loop_step_s)


def sync_step_time_of(meta: Mapping[str, Any]) -> StepTime | None:
    """The synchronized step (a synchronize after every step: one call's latency), when timed."""
    steps = _clean(RunMeta.of(meta).unprofiled_step_wall_s)
    return median_step_time(steps, "unprofiled") if steps else None


def overhead_ratio(profiled_s: Sequence[float] | None, unprofiled_s: Sequence[float] | None) -> Ratio | None:
    """Profiler overhead: median(profiled) / median(unprofiled).

    Interval [low_p / high_u, high_p / low_u] from the two medians' intervals (each at least
    CONFIDENCE when there are 6 or more steps, so at least 2·CONFIDENCE − 1 jointly); none when
    either side has fewer than 2 steps.
    """
    p, u = _clean(profiled_s), _clean(unprofiled_s)
    if not p or not u or median_s(u) <= 0:
        return None
    value = median_s(p) / median_s(u)
    if len(p) < 2 or len(u) < 2:
        return Ratio(value, None, None)
    low_p, high_p, _ = median_interval_s(p)
    low_u, high_u, _ = median_interval_s(u)
    if low_u <= 0:
        return Ratio(value, None, None)
    return Ratio(value, low_p / high_u, high_p / low_u)


def overhead_of(meta: Mapping[str, Any]) -> Ratio | None:
    """run.json's profiler overhead with its interval (worked out for an older run.json)."""
    meta = RunMeta.of(meta)
    recorded = Ratio.from_json(meta.profiler_overhead)
    if recorded is not None:
        return recorded
    return overhead_ratio(meta.step_wall_s, meta.unprofiled_step_wall_s)


def drift_ratio(times_s: Sequence[float]) -> float | None:
    """median(first third) / median(last third) of steps in the order they ran; None below 3 steps."""
    n = len(times_s)
    if n < MIN_STEPS_FOR_DRIFT:
        return None
    third = n // 3
    last = median_s(times_s[n - third:])
    return median_s(times_s[:third]) / last if last > 0 else None


def is_drifting(times_s: Sequence[float], limit: float = DRIFT_RATIO_LIMIT) -> bool:
    """Still warming up: the first third of the steps is more than `limit`× slower than the last."""
    ratio = drift_ratio(times_s)
    return ratio is not None and ratio > limit


def time_until_steady(time_round: Callable[[], list[float]],
                      max_extra_rounds: int = MAX_EXTRA_WARMUP_ROUNDS,
                      drifting: Callable[[list[float]], bool] = is_drifting) -> tuple[list[float], SteadyState]:
    """Time a round of steps; while it drifts, count it as warm-up and time another, at most
    `max_extra_rounds` more. Returns the kept round and what the check found.

    `drifting` decides whether to time again; ranks of a distributed run pass one that agrees
    across ranks (collect/profiler.py), since each extra round runs collectives.
    """
    times = list(time_round())
    first = drift_ratio(times)
    extra = 0
    rounds = 0
    while drifting(times) and rounds < max_extra_rounds:
        extra += len(times)
        rounds += 1
        times = list(time_round())
    final = drift_ratio(times)
    steady = None if final is None else final <= DRIFT_RATIO_LIMIT
    return times, SteadyState(extra, first, final, steady)


def steady_state_of(meta: Mapping[str, Any]) -> SteadyState | None:
    doc = RunMeta.of(meta).steady_state
    if not isinstance(doc, Mapping):
        return None
    first, final = doc.get("first_drift_ratio"), doc.get("final_drift_ratio")
    steady = doc.get("steady")
    return SteadyState(int(doc.get("extra_warmup_steps") or 0), float(first) if _finite(first) else None,
                       float(final) if _finite(final) else None, steady if isinstance(steady, bool) else None)


def steady_state_warning(state: SteadyState | None) -> str | None:
    """One line when the timed steps drifted; None when they did not (or could not be checked)."""
    if state is None or state.extra_warmup_steps == 0 and state.steady is not False:
        return None
    first = f"{state.first_drift_ratio:.2f}×" if state.first_drift_ratio is not None else "?"
    if state.steady is False:
        final = f"{state.final_drift_ratio:.2f}×" if state.final_drift_ratio is not None else "?"
        return (f"step times still drift after {state.extra_warmup_steps} extra warm-up steps (first third "
                f"{final} the last third, limit {DRIFT_RATIO_LIMIT}×): the step time may not be steady; "
                "raise --warmup")
    return (f"step times drifted (first third {first} the last third, limit {DRIFT_RATIO_LIMIT}×): warm-up "
            f"extended by {state.extra_warmup_steps} steps until they settled")


def intervals_overlap(a: StepTime, b: StepTime) -> bool | None:
    """Whether the two step-time intervals overlap; None when either has none."""
    if not (a.has_interval() and b.has_interval()):
        return None
    return a.low_s <= b.high_s and b.low_s <= a.high_s
