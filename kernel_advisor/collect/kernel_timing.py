"""Kernel durations from the light timing pass, laid onto the shapes pass's trace.

`advisor profile` on a GPU records two passes of the same steps (collect/profiler.py): the
shapes pass (CPU ops with their shapes, CUDA kernels) says which op launched which kernel; the
timing pass records CUDA activity only, so the host runs the model at close to its unprofiled
pace, and times the kernels. Recording every CPU op with its shapes costs host time on each op,
which a host-bound step cannot hide (2x on a small conv net, H200); CUDA activity alone costs
little (docs/benchmarks.md, "Profiling overhead").

Both passes run the same steps in the same order, so they launch the same GPU work in the same
order: the n-th kernel, memcpy or memset of one is the n-th of the other (CUPTI numbers launches
in order: the correlation id). The timing pass's durations replace the shapes pass's one for
one; where they differ in count or in any name, nothing is replaced and the run says why.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kernel_advisor.collect.trace import TraceData

PASS_KERNELS_ONLY = "kernels-only"  # durations from the timing pass
PASS_SHAPES = "shapes"  # durations from the shapes pass itself


@dataclass(frozen=True)
class KernelTiming:
    """Which pass timed the kernels, and why not the timing pass when it did not."""

    source: str  # PASS_KERNELS_ONLY or PASS_SHAPES
    events: int  # GPU events whose durations the timing pass gave (0 for PASS_SHAPES)
    reason: str | None = None  # why PASS_SHAPES, when a timing pass ran

    def to_json(self) -> dict:
        return {"source": self.source, "events": self.events, "reason": self.reason}


def with_kernel_timings(shapes: TraceData, timing: TraceData) -> tuple[TraceData, KernelTiming]:
    """`shapes` with every GPU event's duration taken from `timing`, its match by launch order.

    Events keep their start unless the lengthened event before them on the same stream now
    ends later: a stream runs one kernel at a time. On any mismatch `shapes` comes back as is.
    """
    a, b = _in_launch_order(shapes.gpu), _in_launch_order(timing.gpu)
    reason = _mismatch(a, b)
    if reason is not None:
        return shapes, KernelTiming(PASS_SHAPES, 0, reason)
    gpu = shapes.gpu.copy()
    gpu.loc[a.index, "dur_us"] = b["dur_us"].to_numpy(float)
    gpu["ts_us"] = relaid_starts_us(gpu)
    return dataclasses.replace(shapes, gpu=gpu), KernelTiming(PASS_KERNELS_ONLY, len(a))


def _in_launch_order(gpu: pd.DataFrame) -> pd.DataFrame:
    # NB: events without a correlation id (-1: none recorded) sort first, by start.
    return gpu.sort_values(["correlation", "ts_us"], kind="stable")


def _mismatch(a: pd.DataFrame, b: pd.DataFrame) -> str | None:
    """Why the two passes' GPU events cannot be matched one for one (None: they can)."""
    if not len(b):
        return "the timing pass recorded no GPU work"
    if len(a) != len(b):
        return (f"the timing pass ran {len(b)} GPU events, the shapes pass {len(a)} "
                "(the model launches different work from step to step)")
    names_a, names_b = a["name"].to_numpy(), b["name"].to_numpy()
    differ = np.flatnonzero((names_a != names_b) | (a["cat"].to_numpy() != b["cat"].to_numpy()))
    if len(differ):
        i = int(differ[0])
        return (f"GPU event {i + 1} of {len(a)} is {_short(names_b[i])} in the timing pass and "
                f"{_short(names_a[i])} in the shapes pass (the model launches different work from step to step)")
    return None


def relaid_starts_us(gpu: pd.DataFrame) -> np.ndarray:
    """Each event's start, moved later only as far as the end of the event before it on its stream."""
    starts = gpu["ts_us"].to_numpy(float).copy()
    durs = gpu["dur_us"].to_numpy(float)
    keys = gpu["device"].to_numpy() * (1 << 32) + gpu["stream"].to_numpy()
    order = np.lexsort((starts, keys))
    prev_key, prev_end = None, -np.inf
    for i in order:
        if keys[i] != prev_key:
            prev_key, prev_end = keys[i], -np.inf
        if starts[i] < prev_end:
            starts[i] = prev_end
        prev_end = starts[i] + durs[i]
    return starts


def _short(name: str, limit: int = 60) -> str:
    return name if len(name) <= limit else name[: limit - 1] + "…"
