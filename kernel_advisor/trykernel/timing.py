"""Interleaved step timing, per-op device time from torch.profiler, bootstrap intervals.

CUDA: one pair of CUDA events around each step, warm-up excluded, L2 flushed before every
repetition by writing a buffer larger than twice the L2, and the variants interleaved
round by round (rotating which goes first), so clock and thermal drift hit all of them
alike. CPU: the same schedule with time.perf_counter and no cache flush.

Statistics: medians with 95 % percentile-bootstrap intervals; speedups are ratios of
medians, bootstrapped over whole rounds (paired), so a round's shared drift cancels.
"""
from __future__ import annotations

import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from kernel_advisor.collect.nvtx_ranges import nvtx_range
from kernel_advisor.collect.profiler_output import quietly

BOOTSTRAP_SAMPLES = 2000
CONFIDENCE = 0.95
L2_FLUSH_FACTOR = 2
FALLBACK_L2_BYTES = 64 * 2**20  # NB: used only when the driver does not report the L2 size


@dataclass(frozen=True)
class TimedVariant:
    name: str
    activate: Callable[[], AbstractContextManager]  # installs the variant's substitutions
    step: Callable[[], object]


@dataclass(frozen=True)
class Estimate:
    value: float
    low: float
    high: float


def interleaved_times_s(variants: Sequence[TimedVariant], reps: int, warmup: int,
                        device: torch.device) -> dict[str, list[float]]:
    """Step times per variant: `reps` rounds, every variant once per round."""
    for v in variants:
        with v.activate(), nvtx_range(f"advisor/try-kernel/warmup/{v.name}"):
            for _ in range(warmup):
                v.step()
    _sync(device)
    if device.type == "cuda":
        return _cuda_rounds(variants, reps, device)
    return _cpu_rounds(variants, reps)


def _order(variants: Sequence[TimedVariant], round_index: int) -> list[TimedVariant]:
    k = round_index % len(variants)
    return list(variants[k:]) + list(variants[:k])


def _cuda_rounds(variants: Sequence[TimedVariant], reps: int, device: torch.device) -> dict[str, list[float]]:
    flush = torch.empty(l2_flush_bytes(device), dtype=torch.uint8, device=device)
    events: dict[str, list[tuple]] = {v.name: [] for v in variants}
    for r in range(reps):
        for v in _order(variants, r):
            with v.activate(), nvtx_range(f"advisor/try-kernel/{v.name}"):
                flush.zero_()  # evicts the previous step's data from L2; not timed
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                v.step()
                end.record()
            events[v.name].append((start, end))
        torch.cuda.synchronize(device)  # one round at a time: the queue never runs far ahead
    return {name: [s.elapsed_time(e) * 1e-3 for s, e in pairs] for name, pairs in events.items()}


def _cpu_rounds(variants: Sequence[TimedVariant], reps: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {v.name: [] for v in variants}
    for r in range(reps):
        for v in _order(variants, r):
            with v.activate(), nvtx_range(f"advisor/try-kernel/{v.name}"):
                t0 = time.perf_counter()
                v.step()
                times[v.name].append(time.perf_counter() - t0)
    return times


def l2_flush_bytes(device: torch.device) -> int:
    l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)) or FALLBACK_L2_BYTES
    return L2_FLUSH_FACTOR * l2 + 2**20


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


@dataclass(frozen=True)
class OpTimes:
    per_name_s: dict[str, float]  # device time per step of each requested name (outermost only)
    total_s: float  # all device time per step


def profiled_op_times(step: Callable[[], object], activate: Callable[[], AbstractContextManager],
                      names: set[str], steps: int, device: torch.device) -> OpTimes:
    """Device time per step of ops (or try_kernel:: ranges) named `names`, from torch.profiler.

    An event counts only when no enclosing event has a name in `names` (aten::softmax
    encloses aten::_softmax: counted once). On CPU "device time" is the ops' CPU time.
    """
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with activate():
        step()  # one untimed step: lazy initialisation stays out of the profile
        _sync(device)
        with quietly(profile(activities=activities)) as prof:
            for _ in range(steps):
                step()
            _sync(device)
    return _sum_events(prof.events(), names, steps, device.type == "cuda")


def _sum_events(events, names: set[str], steps: int, cuda: bool) -> OpTimes:
    per_name = {n: 0.0 for n in names}
    total_us = 0.0
    for e in events:
        if e.device_type != torch.autograd.DeviceType.CPU:
            continue  # GPU-side copies of ranges would count the same kernels twice
        total_us += e.self_device_time_total if cuda else e.self_cpu_time_total
        if e.name in names and not _has_named_ancestor(e, names):
            per_name[e.name] += e.device_time_total if cuda else e.cpu_time_total
    return OpTimes({n: t * 1e-6 / steps for n, t in per_name.items()}, total_us * 1e-6 / steps)


def _has_named_ancestor(event, names: set[str]) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name in names:
            return True
        parent = parent.cpu_parent
    return False


def peak_memory_bytes(step: Callable[[], object], activate: Callable[[], AbstractContextManager],
                      device: torch.device) -> int | None:
    """torch.cuda.max_memory_allocated over one step; None on CPU."""
    if device.type != "cuda":
        return None
    with activate():
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        step()
        torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device))
