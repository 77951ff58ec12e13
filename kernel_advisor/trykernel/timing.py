"""Per-op device time from torch.profiler, and peak memory, of a variant's step.

Step timing is the user's loop's (collect/loop_timing.py), shared with every command.
"""
from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch.profiler import ProfilerActivity, profile

from kernel_advisor.collect.profiler_output import quietly


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


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
