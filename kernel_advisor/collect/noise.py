"""Is the machine quiet enough to time on? The causes of noisy step times, detected and named.

On a machine shared with another job, torch's intra-op threads and the other job's threads
take turns on the cores: a step waits for its slowest thread, so step times spread by 10×,
profiled and unprofiled steps see different machines (a profiler "overhead" of 8× or 0.2×) and
the advice built on them flips from one profile to the next. Each cause has a threshold:

- the step median's interval is wider than ±STEP_INTERVAL_FRAC of the median;
- the slowest profiled step is more than PROFILED_SPREAD_RATIO× the fastest;
- the profiler overhead (profiled / unprofiled medians) is outside OVERHEAD_RANGE: the
  profiler adds work, so below 0.8 the two sides ran on different machines, and above 3× the
  profiled steps were slowed by something besides the profiler;
- more runnable threads than cores: torch's intra-op threads plus the runnable threads of
  other processes (Linux: /proc/stat `procs_running` less this process's own runnable threads),
  against the CPUs this process may run on (os.sched_getaffinity).

The fix is fewer threads (`advisor profile --threads N`) or a quieter machine.
Pure but for `sample_load` (reads /proc and torch's thread count).
"""
from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from kernel_advisor.collect.step_time import Ratio, StepTime, median_step_time
from kernel_advisor.records.run import RunMeta

STEP_INTERVAL_FRAC = 0.25
PROFILED_SPREAD_RATIO = 3.0
OVERHEAD_RANGE = (0.8, 3.0)

STEP_INTERVAL = "step-interval"
PROFILED_SPREAD = "profiled-spread"
PROFILER_OVERHEAD = "profiler-overhead"
OVERSUBSCRIBED = "oversubscribed"


@dataclass(frozen=True)
class Load:
    """Threads that wanted a core while the steps were timed, against the cores there are."""

    cores: int  # CPUs this process may run on
    torch_threads: int  # torch's intra-op threads
    other_runnable: float  # median over the samples of runnable threads outside this process
    samples: int

    @property
    def runnable(self) -> float:
        return self.torch_threads + self.other_runnable

    def oversubscribed(self) -> bool:
        return self.runnable > self.cores

    def threads_that_fit(self) -> int:
        """The --threads that would leave no thread waiting for a core (at least 1)."""
        return max(1, int(math.floor(self.cores - self.other_runnable)))

    def to_json(self) -> dict:
        return {"cores": self.cores, "torch_threads": self.torch_threads,
                "other_runnable": self.other_runnable, "samples": self.samples}

    @classmethod
    def from_json(cls, doc: Any) -> "Load | None":
        if not isinstance(doc, Mapping):
            return None
        try:
            return cls(int(doc["cores"]), int(doc["torch_threads"]), float(doc["other_runnable"]),
                       int(doc["samples"]))
        except (KeyError, TypeError, ValueError):
            return None


def other_runnable_now(proc: Path = Path("/proc")) -> int | None:
    """Runnable threads of other processes right now; None where /proc does not say (not Linux)."""
    try:
        stat = (proc / "stat").read_text()
        running = next(int(line.split()[1]) for line in stat.splitlines() if line.startswith("procs_running "))
    except (OSError, StopIteration, ValueError, IndexError):
        return None
    return max(0, running - _own_runnable(proc / "self" / "task"))


def _own_runnable(tasks: Path) -> int:
    """This process's threads in state R (the reader itself, and intra-op threads still spinning)."""
    count = 0
    try:
        entries = list(tasks.iterdir())
    except OSError:
        return 1
    for task in entries:
        try:
            # NB: the state follows the command name, which is in parentheses and may hold spaces.
            state = (task / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        count += state == "R"
    return max(count, 1)


class LoadSampler:
    """Samples of other processes' runnable threads, taken between timed windows (never inside one)."""

    def __init__(self) -> None:
        self.samples: list[int] = []

    def sample(self) -> None:
        n = other_runnable_now()
        if n is not None:
            self.samples.append(n)

    def load(self) -> Load | None:
        if not self.samples:
            return None
        import torch

        return Load(_cores(), int(torch.get_num_threads()), float(statistics.median(self.samples)),
                    len(self.samples))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@dataclass(frozen=True)
class Noise:
    causes: tuple[str, ...]
    figures: Mapping[str, float | None]
    load: Load | None = None
    extra_windows: int = 0  # back-to-back windows timed beyond the planned ones because of noise
    thresholds: Mapping[str, Any] = field(default_factory=lambda: {
        "step_interval_frac": STEP_INTERVAL_FRAC, "profiled_spread_ratio": PROFILED_SPREAD_RATIO,
        "overhead_range": list(OVERHEAD_RANGE), "runnable_threads_per_core": 1.0})

    @property
    def noisy(self) -> bool:
        return bool(self.causes)

    def to_json(self) -> dict:
        return {"noisy": self.noisy, "causes": list(self.causes), "figures": dict(self.figures),
                "load": self.load.to_json() if self.load is not None else None,
                "extra_windows": self.extra_windows, "thresholds": dict(self.thresholds)}


def interval_frac(step: StepTime | None) -> float | None:
    """The larger half of the step's interval, as a fraction of the step."""
    if step is None or not step.has_interval() or step.value_s <= 0:
        return None
    return max(step.high_s - step.value_s, step.value_s - step.low_s) / step.value_s


def spread_ratio(times_s: Sequence[float]) -> float | None:
    """Slowest / fastest step; None below 2 steps."""
    x = [t for t in times_s if isinstance(t, (int, float)) and math.isfinite(t)]
    if len(x) < 2 or min(x) <= 0:
        return None
    return max(x) / min(x)


def detect_noise(step: StepTime | None, profiled_s: Sequence[float], overhead: Ratio | None,
                 load: Load | None, extra_windows: int = 0) -> Noise:
    frac = interval_frac(step)
    spread = spread_ratio(profiled_s)
    ratio = overhead.value if overhead is not None else None
    causes = []
    if frac is not None and frac > STEP_INTERVAL_FRAC:
        causes.append(STEP_INTERVAL)
    if spread is not None and spread > PROFILED_SPREAD_RATIO:
        causes.append(PROFILED_SPREAD)
    if ratio is not None and not OVERHEAD_RANGE[0] <= ratio <= OVERHEAD_RANGE[1]:
        causes.append(PROFILER_OVERHEAD)
    if load is not None and load.oversubscribed():
        causes.append(OVERSUBSCRIBED)
    figures = {"step_interval_frac": frac, "profiled_spread_ratio": spread, "profiler_overhead": ratio,
               "runnable_threads": load.runnable if load is not None else None,
               "cores": load.cores if load is not None else None}
    return Noise(tuple(causes), figures, load, extra_windows)


def step_too_wide(times_s: Sequence[float]) -> bool:
    """The step median's interval (collect/step_time.py) wider than ±STEP_INTERVAL_FRAC."""
    frac = interval_frac(median_step_time(list(times_s), "back-to-back")) if len(times_s) > 1 else None
    return frac is not None and frac > STEP_INTERVAL_FRAC


def noise_warning(meta: Mapping[str, Any]) -> str | None:
    """One line when the profile found its timings noisy: the causes with their figures, and the fix."""
    doc = RunMeta.of(meta).noise
    if not isinstance(doc, Mapping) or not doc.get("causes"):
        return None
    figures = doc.get("figures") or {}
    load = Load.from_json(doc.get("load"))
    said = [_cause_text(c, figures, load) for c in doc["causes"]]
    threads = load.threads_that_fit() if load is not None else max(1, _torch_threads(meta) // 2)
    more = doc.get("extra_windows") or 0
    timed = f"; {more} more windows timed" if more else ""
    return (f"the timings are unreliable ({'; '.join(s for s in said if s)}{timed}): rerun with "
            f"--threads {threads} or on a quieter machine")


def _torch_threads(meta: Mapping[str, Any]) -> int:
    threads = RunMeta.of(meta).args.get("threads")
    return int(threads) if isinstance(threads, int) and threads > 0 else 2


def _cause_text(cause: str, figures: Mapping[str, Any], load: Load | None) -> str:
    def num(key: str) -> float | None:
        v = figures.get(key)
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None

    if cause == STEP_INTERVAL and num("step_interval_frac") is not None:
        return f"step interval ±{100 * num('step_interval_frac'):.0f} %, limit ±{100 * STEP_INTERVAL_FRAC:.0f} %"
    if cause == PROFILED_SPREAD and num("profiled_spread_ratio") is not None:
        return f"profiled steps differ {num('profiled_spread_ratio'):.1f}×, limit {PROFILED_SPREAD_RATIO:g}×"
    if cause == PROFILER_OVERHEAD and num("profiler_overhead") is not None:
        lo, hi = OVERHEAD_RANGE
        return f"profiler overhead {num('profiler_overhead'):.2f}×, outside {lo:g}–{hi:g}×"
    if cause == OVERSUBSCRIBED and load is not None:
        return (f"{load.runnable:g} runnable threads on {load.cores} cores: torch's {load.torch_threads} "
                f"plus {load.other_runnable:g} from other processes")
    return cause


def step_noise_s(step: StepTime | None) -> float:
    """How far below the median the step's interval reaches (median − low); 0 without an interval."""
    if step is None or not step.has_interval():
        return 0.0
    return max(step.value_s - step.low_s, 0.0)


def within_noise(saving_s: float | None, noise_s: float) -> bool:
    """A saving the step's own interval could hide: the step after it would still lie inside
    today's interval (saving ≤ median − low), so a rank built on it would rest on noise."""
    return saving_s is not None and noise_s > 0 and saving_s <= noise_s


def noise_of(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    doc = RunMeta.of(meta).noise
    return doc if isinstance(doc, Mapping) else None

