"""Timing windows on every rank at once, so the ranks' collectives stay paired.

Every rank runs the same windows in the same order (the experiment engine's back-to-back
windows, variants rotating per round). What could make ranks diverge is agreed through a
collective: the window length (the longest any rank needs) and whether another round runs
(rank 0's clock decides, after each round, outside the timed spans). A window's time is the
job's: the slowest rank's, because a synchronous job moves at that rank's pace.
"""
from __future__ import annotations

import math
import time
from typing import Sequence

import torch
import torch.distributed as dist

from kernel_advisor.collect.loop_timing import (
    TimedStep, autorange_steps, max_over_ranks, rotated, warm_up, window_s)
from kernel_advisor.collect.nvtx_ranges import nvtx_range


def _comm_device(device: torch.device) -> torch.device:
    return device if device.type == "cuda" else torch.device("cpu")


def agreed_steps(step: TimedStep, device: torch.device) -> int:
    """Steps per window: autorange on each rank, the largest wins."""
    with step.activate():
        mine = autorange_steps(step.step, device)
    return int(max_over_ranks(mine, device))


def rank0_says(flag: bool, device: torch.device) -> bool:
    """Rank 0's `flag`, on every rank."""
    t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=_comm_device(device))
    dist.broadcast(t, src=0)
    return bool(t.item())


def lockstep_windows_s(variants: Sequence[TimedStep], windows: int, steps: int, warmup: int,
                       device: torch.device, deadline: float = math.inf) -> dict[str, list[float]]:
    """Per variant, the job's step time per window: `windows` rounds, or fewer once rank 0's
    time.monotonic() passed `deadline` (at least one round runs)."""
    warm_up(variants, warmup)
    mine: dict[str, list[float]] = {v.name: [] for v in variants}
    for r in range(windows):
        for v in rotated(variants, r):
            with v.activate(), nvtx_range(f"advisor/back-to-back/{v.name}"):
                mine[v.name].append(window_s(v.step, steps, device))
        if not rank0_says(time.monotonic() <= deadline, device):
            break
    return {name: slowest_rank(times, device) for name, times in mine.items()}


def slowest_rank(times_s: list[float], device: torch.device) -> list[float]:
    """Per window, the largest time over the ranks (every rank timed the same windows)."""
    t = torch.tensor(times_s, dtype=torch.float64, device=_comm_device(device))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(x) for x in t.tolist()]
