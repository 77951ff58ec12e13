"""What one rank leaves in rank<r>/: its analyzed tables, trace, collective calls and rank.json.

rank.json has run.json's schema (collect/run_meta.py builds both) plus a "rank" key,
so the merged run.json is rank 0's with the "distributed" summary added.
"""
from __future__ import annotations

import dataclasses
import gzip
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.nesting import step_windows
from kernel_advisor.collect.profiler import Capture
from kernel_advisor.collect.run_meta import run_json
from kernel_advisor.collect.rundir import write_json_atomic, write_table
from kernel_advisor.distributed.comms import Overlap, comm_calls, comm_overlap, compute_intervals_us, windows_array
from kernel_advisor.pipeline import analyze_capture  # the same sequence a single-process run takes

RANK_FILES = {"ops": "ops.csv", "sequence": "sequence.csv", "trace": "trace.json.gz",
              "comms": "comms.csv", "rank": "rank.json"}


def call_spans_us(calls: pd.DataFrame) -> np.ndarray:
    """[[start, end], ...] of the collective calls, µs."""
    starts = calls["ts_us"].to_numpy(float)
    return np.column_stack([starts, starts + calls["dur_us"].to_numpy(float)])


def overlap_json(overlap: Overlap) -> dict:
    """Overlap as JSON, NaN (no communication) as null."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v)
            for k, v in dataclasses.asdict(overlap).items()}


def overlap_by_collective(calls: pd.DataFrame, compute_us: np.ndarray) -> dict[str, dict]:
    """Per collective, how much of its time compute hid: under FSDP, the all-gathers' share is
    prefetch at work (the next block's parameters gathered while this one computes)."""
    return {name: overlap_json(comm_overlap(call_spans_us(group), compute_us))
            for name, group in calls.groupby("collective", sort=True)}


def gzip_copy(src: Path, dst: Path) -> None:
    with open(src, "rb") as f, gzip.open(dst, "wb", compresslevel=6) as g:
        shutil.copyfileobj(f, g, length=1 << 20)


def write_rank_dir(rank_dir: Path, loaded: LoadedModel, args: dict, cap: Capture, info: dict) -> dict:
    """Attribute and analyze this rank's trace, find its collectives, write rank<r>/; returns rank.json."""
    device_type = loaded.device.type
    run = analyze_capture(loaded, args, cap)
    trace, attr, ops, meta = run.trace, run.attr, run.ops, run.meta
    windows = windows_array(step_windows(trace))
    device_index = loaded.device.index if device_type == "cuda" else None
    calls = comm_calls(trace, info["world_size"], windows, device_index)
    compute = compute_intervals_us(trace, windows, device_type, device_index)
    overlap = comm_overlap(call_spans_us(calls), compute)
    meta.update(files=dict(RANK_FILES),
                rank={**info, "comm_calls": len(calls), "overlap": overlap_json(overlap),
                      "overlap_by_collective": overlap_by_collective(calls, compute)})
    rank_dir.mkdir(parents=True)
    write_table(rank_dir / RANK_FILES["ops"], ops)
    write_table(rank_dir / RANK_FILES["sequence"], attr.sequence)
    write_table(rank_dir / RANK_FILES["comms"], calls)
    gzip_copy(cap.trace_path, rank_dir / RANK_FILES["trace"])
    write_json_atomic(rank_dir / RANK_FILES["rank"], run_json(meta))  # last: marks the rank complete
    return meta
