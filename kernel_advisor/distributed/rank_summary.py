"""One rank's trace reduced to what the multi-rank merge needs: step times, device busy,
its collective calls and their overlap with compute. A few kB per rank, whatever the trace's
size, so 64 or more ranks merge without ever holding two traces at once.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from kernel_advisor.collect.attribute import step_windows
from kernel_advisor.collect.trace import read_trace
from kernel_advisor.distributed.comms import COMM_COLUMNS, comm_calls, compute_intervals_us, windows_array
from kernel_advisor.distributed.merge import RankResult
from kernel_advisor.distributed.overlap import Overlap, comm_overlap, covered_length
from kernel_advisor.distributed.rank_output import call_spans_us


@dataclass(frozen=True)
class RankSummary:
    rank: int
    file: str
    device_type: str  # "cuda" when the trace holds GPU kernels, else "cpu"
    device_name: str
    steps: int
    step_wall_s: tuple[float, ...]  # per step window (ProfilerStep#N), in trace order
    device_busy_s: float  # union of compute and communication intervals in the steps
    overlap: dict  # Overlap's fields
    calls: tuple[tuple, ...]  # COMM_COLUMNS rows

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(data: dict) -> "RankSummary":
        return RankSummary(**{**data, "step_wall_s": tuple(data["step_wall_s"]),
                              "calls": tuple(tuple(c) for c in data["calls"])})

    def calls_frame(self) -> pd.DataFrame:
        frame = pd.DataFrame(list(self.calls), columns=list(COMM_COLUMNS))
        for column in ("ts_us", "dur_us", "bytes"):  # None (unknown size) back to NaN
            frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
        return frame

    def result(self) -> RankResult:
        """The merge's view (distributed.merge.RankResult)."""
        return RankResult(rank=self.rank, steps=self.steps, step_wall_s=self.step_wall_s,
                          device_busy_s=self.device_busy_s, calls=self.calls_frame(),
                          overlap=Overlap(**{k: math.nan if v is None else v for k, v in self.overlap.items()}))


def device_name(trace_meta: dict, device_type: str) -> str:
    """The GPU's name from a kineto trace's metadata (its deviceProperties)."""
    props = trace_meta.get("deviceProperties")
    if device_type == "cuda" and isinstance(props, list) and props and isinstance(props[0], dict):
        return str(props[0].get("name", "GPU"))
    return "cpu" if device_type == "cpu" else "GPU"


def summarize_trace(path: Path, rank: int, world_size: int) -> RankSummary:
    """Read one rank's trace (in this process) and reduce it to its RankSummary."""
    trace = read_trace(path, workers=1)  # NB: one process per rank already; no pool inside it
    device_type = "cuda" if len(trace.gpu) else "cpu"
    steps = step_windows(trace)
    windows = windows_array(steps)
    calls = comm_calls(trace, world_size, windows)
    comm = call_spans_us(calls)
    compute = compute_intervals_us(trace, windows, device_type)
    overlap = comm_overlap(comm, compute)
    origin = float(windows[0, 0]) if len(windows) else 0.0  # ~1e12 µs: subtract before summing lengths
    busy_s = covered_length(np.concatenate([comm, compute]) - origin) * 1e-6
    step_wall_s = tuple(float(s) for s in (windows[:, 1] - windows[:, 0]) * 1e-6)
    overlap_doc = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(overlap).items()}
    rows = tuple(tuple(_plain(v) for v in row) for row in calls.itertuples(index=False))
    return RankSummary(rank=rank, file=str(path), device_type=device_type,
                       device_name=device_name(trace.meta, device_type), steps=len(step_wall_s),
                       step_wall_s=step_wall_s, device_busy_s=busy_s, overlap=overlap_doc, calls=rows)


def _plain(value):
    """numpy scalars as Python values, NaN as None: the summary crosses a pipe as JSON."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value
