"""The user's loop, timed: back-to-back steps between two synchronizes, variants interleaved.

A training loop or a batch pipeline never waits for the device between steps: the host
queues step k+1 while the device still runs step k, so a host-bound model's step is its host
time and a device-bound model's its device time, never their sum. That is what this module
times (the *back-to-back* regime): a window is `steps` calls of the step with one
synchronize before and one after, and the step time is the window's wall time over `steps`.
No cache is flushed between steps, as none is in the user's loop.

Every command that quotes a step time uses it: profile's unprofiled steps, `recommend
--measure`'s eager step and every variant, try-kernel's variants. Beside it, where asked,
the *synchronized* regime (a synchronize after every step: the latency one request sees).

Variants are interleaved window by window, the first one rotating, so the host's and the
GPU's clock drift hits all of them alike; statistics are medians of windows with 95 %
percentile-bootstrap intervals, and speedups ratios of medians bootstrapped over whole
rounds (paired), so a round's shared drift cancels.
"""
from __future__ import annotations

import math
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from kernel_advisor.collect.nvtx_ranges import nvtx_range

BACK_TO_BACK = "back-to-back"
SYNCHRONIZED = "synchronized"
REGIMES = (BACK_TO_BACK, SYNCHRONIZED)
BOOTSTRAP_SAMPLES = 2000
CONFIDENCE = 0.95
# A window long enough that the two synchronizes and the host's timer are noise against it,
# short enough that many windows fit a budget; never fewer steps than a pipeline keeps in flight.
TARGET_WINDOW_S = 0.02
MIN_WINDOW_STEPS = 3
MAX_WINDOW_STEPS = 200


@dataclass(frozen=True)
class TimedStep:
    name: str
    activate: Callable[[], AbstractContextManager]  # entered once per window, outside the timed span
    step: Callable[[], object]


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float

    def to_json(self) -> dict:
        return {"value": _finite(self.value), "low": _finite(self.low), "high": _finite(self.high)}


def regime_label(device: torch.device, steps_per_window: int) -> str:
    """For people: what the step figure is."""
    clock = "time.perf_counter" if device.type == "cpu" else "time.perf_counter with torch.cuda.synchronize"
    return (f"{BACK_TO_BACK}: {steps_per_window} steps between two synchronizes, per window "
            f"({clock}), variants interleaved window by window")


def steps_per_window(step_estimate_s: float) -> int:
    """Steps per window for a step of about `step_estimate_s` (one synchronized step's time)."""
    if not math.isfinite(step_estimate_s) or step_estimate_s <= 0:
        return MIN_WINDOW_STEPS
    return int(min(MAX_WINDOW_STEPS, max(MIN_WINDOW_STEPS, math.ceil(TARGET_WINDOW_S / step_estimate_s))))


def in_distributed_run() -> bool:
    """Whether this process is one rank of a torch.distributed job of two or more."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def max_over_ranks(value: float, device: torch.device) -> float:
    """The largest `value` over the ranks (this process's own outside a distributed job).

    Whatever decides how many steps run (a window's length, another round) must be agreed:
    every step runs the model's collectives, and a rank that ran fewer would leave its peers'
    collectives unmatched (gloo: "Connection closed by peer" once it exits; NCCL: a hang)."""
    if not in_distributed_run():
        return value
    import torch.distributed as dist

    t = torch.tensor([float(value)], dtype=torch.float64, device=device if device.type == "cuda" else "cpu")
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def autorange_steps(step: Callable[[], object], device: torch.device) -> int:
    """Steps per window, found as timeit's autorange does: double the window until it lasts
    TARGET_WINDOW_S. Timed back to back, so one slow (descheduled) step cannot size it."""
    steps = MIN_WINDOW_STEPS
    while steps < MAX_WINDOW_STEPS and window_s(step, steps, device) * steps < TARGET_WINDOW_S:
        steps = min(MAX_WINDOW_STEPS, steps * 2)
    return steps


def window_s(step: Callable[[], object], steps: int, device: torch.device) -> float:
    """One window: the mean step time of `steps` back-to-back steps."""
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    _sync(device)
    return (time.perf_counter() - t0) / steps


def synchronized_s(step: Callable[[], object], device: torch.device) -> float:
    """One step, synchronized before and after: the latency one call sees."""
    return window_s(step, 1, device)


def interleaved_windows_s(variants: Sequence[TimedStep], windows: int, steps: int, warmup: int,
                          device: torch.device, regime: str = BACK_TO_BACK, deadline_s: float = math.inf,
                          past_deadline: Callable[[float], bool] | None = None) -> dict[str, list[float]]:
    """Per variant, one step time per window (`steps` steps back to back, or one synchronized
    step when `regime` is synchronized), `windows` rounds with every variant once per round.

    Stops after the round in which `deadline_s` (time.monotonic) passed; at least one round runs.
    `past_deadline(deadline_s)` decides that instead where ranks must agree (distributed lockstep).
    """
    per_window = steps if regime == BACK_TO_BACK else 1
    warm_up(variants, warmup)
    times: dict[str, list[float]] = {v.name: [] for v in variants}
    for r in range(windows):
        for v in rotated(variants, r):
            with v.activate(), nvtx_range(f"advisor/{regime}/{v.name}"):
                times[v.name].append(window_s(v.step, per_window, device))
        if (past_deadline or _past)(deadline_s):
            break
    return times


def _past(deadline_s: float) -> bool:
    return time.monotonic() > deadline_s


def warm_up(variants: Sequence[TimedStep], steps: int) -> None:
    """Untimed steps of every variant, each inside its contexts, before the windows."""
    for v in variants:
        with v.activate(), nvtx_range(f"advisor/warmup/{v.name}"):
            for _ in range(steps):
                v.step()


def rotated(variants: Sequence[TimedStep], round_index: int) -> list[TimedStep]:
    """The round's order: each round starts one variant later, so none always goes first."""
    k = round_index % len(variants)
    return list(variants[k:]) + list(variants[:k])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_ci(times_s: Sequence[float], seed: int = 0) -> Estimate:
    """Median with a 95 % percentile-bootstrap interval of the median."""
    x = np.asarray(times_s, dtype=float)
    idx = np.random.default_rng(seed).integers(0, len(x), size=(BOOTSTRAP_SAMPLES, len(x)))
    boot = np.median(x[idx], axis=1)
    lo, hi = np.quantile(boot, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
    return Estimate(float(np.median(x)), float(lo), float(hi))


def speedup_ci(baseline_s: Sequence[float], variant_s: Sequence[float], seed: int = 0) -> Estimate:
    """median(baseline) / median(variant) with a paired (by round) 95 % bootstrap interval."""
    b, v = np.asarray(baseline_s, dtype=float), np.asarray(variant_s, dtype=float)
    n = min(len(b), len(v))
    b, v = b[:n], v[:n]
    idx = np.random.default_rng(seed).integers(0, n, size=(BOOTSTRAP_SAMPLES, n))
    boot = np.median(b[idx], axis=1) / np.median(v[idx], axis=1)
    lo, hi = np.quantile(boot, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
    return Estimate(float(np.median(b) / np.median(v)), float(lo), float(hi))


def verdict(speedup: Estimate) -> str:
    if speedup.low > 1.0:
        return "faster"
    if speedup.high < 1.0:
        return "slower"
    return "no measurable difference"


def _finite(x: float) -> float | None:
    return x if x is not None and math.isfinite(x) else None
