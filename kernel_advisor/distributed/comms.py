"""Communication in one rank's trace: which events are collectives, what they move, how fast.

GPU (NCCL): kernels whose name starts with `nccl`. torch.profiler annotates them with
"Collective name", "In msg nelems", "Out msg nelems", "Group size" and "dtype"; the
`record_param_comms` op that launched them carries the same keys and is the fallback.
CPU (gloo): a collective runs on gloo's worker threads as a `gloo:<collective>` range
with the tensor's dims and element type. These events come from `TraceData.collectives`,
which the trace reader fills in its one pass over the file. Bandwidths follow NCCL's
nccl-tests conventions (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from kernel_advisor import dtypes
from kernel_advisor.collect.trace import GLOO_PREFIX, TraceData, is_nccl_kernel

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
               "send_recv", "gather", "scatter", "barrier", "other")
# Checked in order on the name with everything but letters removed: "reducescatter" must
# win over "reduce", "allgather" over "gather".
_PREFIXES = (("allreduce", "all_reduce"), ("allgather", "all_gather"),
             ("reducescatter", "reduce_scatter"), ("alltoall", "all_to_all"),
             ("broadcast", "broadcast"), ("sendrecv", "send_recv"), ("send", "send_recv"),
             ("recv", "send_recv"), ("reduce", "reduce"), ("gather", "gather"),
             ("scatter", "scatter"), ("barrier", "barrier"))
COMM_COLUMNS = ("collective", "name", "source", "ts_us", "dur_us", "bytes", "group_size", "dtype",
                "stream")
_CPU_CATEGORIES = ("user_annotation", "cpu_op")


# ---------------------------------------------------------------- names


def normalise_collective(raw: str) -> str:
    """'allreduce', 'AllReduce', 'c10d::_allgather_base_', 'gloo:all_reduce' → canonical name."""
    text = raw.split("::")[-1].split(":")[-1]
    key = re.sub(r"[^a-z]", "", text.lower())
    for prefix, canonical in _PREFIXES:
        if key.startswith(prefix):
            return canonical
    return "other"


def is_comm_kernel(name: str) -> bool:
    """NCCL launches kernels named ncclKernel_* (< 2.19) or ncclDevKernel_* (≥ 2.19)."""
    return is_nccl_kernel(name)


def kernel_collective(name: str) -> str:
    """The collective an NCCL kernel implements, from its name: ncclDevKernel_AllReduce_Sum_f32_RING_LL."""
    parts = name.split("(")[0].split("_")
    return normalise_collective(parts[1]) if len(parts) > 1 else "other"


def itemsize_bytes_or_nan(dtype: str) -> float:
    """Bytes per element of a dtype as the trace names it: a c10::ScalarType name (an NCCL
    kernel's "dtype" arg) or a profiler type name (gloo's "Input type"); NaN when unknown."""
    size = dtypes.itemsize_bytes(dtype)
    return math.nan if size is None else float(size)


# ---------------------------------------------------------------- bandwidth formulas


def message_bytes(collective: str, in_nelems: float, out_nelems: float, itemsize: float,
                  group_size: int) -> float:
    """nccl-tests' "size" of one call: the larger of its input and output buffers, in bytes.

    All-reduce moves count × itemsize (in = out); all-gather is sized by its output
    (n × the input), reduce-scatter by its input (n × the output); when the trace records
    only the smaller side, it is scaled by n.
    """
    has_in, has_out = _positive(in_nelems), _positive(out_nelems)
    if collective == "all_gather" and has_in and not has_out:
        return in_nelems * group_size * itemsize
    if collective == "reduce_scatter" and has_out and not has_in:
        return out_nelems * group_size * itemsize
    sides = [x for x, ok in ((in_nelems, has_in), (out_nelems, has_out)) if ok]
    return max(sides) * itemsize if sides else math.nan


def _positive(x: float | None) -> bool:
    return x is not None and not math.isnan(x) and x > 0


# ---------------------------------------------------------------- calls, from TraceData.collectives


def windows_array(steps: pd.DataFrame) -> np.ndarray:
    """nesting.step_windows' [ts_us, end_us) table as an (n, 2) array."""
    return steps[["ts_us", "end_us"]].to_numpy(float).reshape(-1, 2)


def in_windows(ts_us: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """True where a timestamp lies in one of the sorted [start, end) windows; all True without any."""
    if not len(windows):
        return np.ones(len(ts_us), dtype=bool)
    idx = np.searchsorted(windows[:, 0], ts_us, side="right") - 1
    ok = idx >= 0
    return ok & (ts_us < windows[np.clip(idx, 0, None), 1])


def _launch_info(collectives: pd.DataFrame) -> dict[int, tuple]:
    """External id → the CPU event that describes a collective (record_param_comms), earliest first."""
    cpu = collectives[collectives["cat"].isin(_CPU_CATEGORIES) & (collectives["collective"] != "")
                      & (collectives["ext_id"] != -1)]
    out: dict[int, tuple] = {}
    for row in cpu.itertuples(index=False):
        out.setdefault(row.ext_id, row)
    return out


def _nccl_row(row, described: dict, world_size: int) -> dict:
    # NB: a kernel's "Collective name" recorded as "" counts as not recorded (the kernel name then says).
    info = row if row.collective else described.get(row.ext_id)
    collective = normalise_collective(info.collective) if info is not None else kernel_collective(row.name)
    group_recorded = math.nan if info is None else info.group_size
    group = world_size if math.isnan(group_recorded) else int(group_recorded)
    dtype = "" if info is None else info.dtype
    in_nelems, out_nelems = (math.nan, math.nan) if info is None else (info.in_nelems, info.out_nelems)
    size = message_bytes(collective, in_nelems, out_nelems, itemsize_bytes_or_nan(dtype), group)
    return {"collective": collective, "name": row.name, "source": "nccl_kernel", "ts_us": row.ts_us,
            "dur_us": row.dur_us, "bytes": size, "group_size": group, "dtype": dtype,
            "stream": "" if row.stream == -1 else str(row.stream)}


def _gloo_row(row, world_size: int) -> dict:
    collective = normalise_collective(row.name)
    dims = json.loads(row.input_dims) if row.input_dims else []
    types = json.loads(row.input_types) if row.input_types else []
    nelems = sum(float(np.prod(d)) for d in dims if isinstance(d, list) and d and
                 all(isinstance(x, int) for x in d))
    dtype = next((t for t in types if t), "")
    size = message_bytes(collective, nelems, math.nan, itemsize_bytes_or_nan(dtype), world_size)
    # NB: a thread the trace names by text (not kineto's integer tid) shows as its negative id.
    return {"collective": collective, "name": row.name, "source": "gloo", "ts_us": row.ts_us,
            "dur_us": row.dur_us, "bytes": size, "group_size": world_size, "dtype": dtype,
            "stream": str(row.tid)}


def comm_calls(trace: TraceData, world_size: int, windows: np.ndarray,
               device_index: int | None = None) -> pd.DataFrame:
    """One row per collective call that starts in a profiled step (columns COMM_COLUMNS), by time.

    Read from the trace's collectives table (filled as the trace was read; the file is not
    opened again). `device_index` keeps only the kernels of that GPU (a rank profiles its own device).
    """
    table = trace.collectives
    described = _launch_info(table)
    rows = []
    for row in table.itertuples(index=False):
        if row.cat == "kernel" and is_comm_kernel(row.name):
            if device_index is None or row.device in (-1, device_index):
                rows.append(_nccl_row(row, described, world_size))
        elif row.name.startswith(GLOO_PREFIX) and row.cat in _CPU_CATEGORIES:
            rows.append(_gloo_row(row, world_size))
    calls = pd.DataFrame(rows, columns=list(COMM_COLUMNS))
    keep = in_windows(calls["ts_us"].to_numpy(float), windows)
    return calls[keep].sort_values("ts_us", kind="stable").reset_index(drop=True)


def compute_intervals_us(trace: TraceData, windows: np.ndarray, device_type: str,
                         device_index: int | None = None) -> np.ndarray:
    """[[start, end], ...] of the work communication can hide behind, in the profiled steps.

    GPU: every non-NCCL kernel on the rank's device. CPU: aten ops on threads other than
    gloo's. NB: on CPU an aten op's interval includes time it spends blocked, and nested
    ops repeat their parent's interval; the union taken by overlap.py counts each µs once.
    """
    if device_type == "cuda":
        gpu = trace.gpu
        keep = (gpu["cat"] == "kernel") & ~gpu["name"].map(is_comm_kernel).astype(bool)
        if device_index is not None:
            keep &= gpu["device"] == device_index
        rows = gpu[keep]
    else:
        ann = trace.annotations
        gloo_threads = set(ann.loc[ann["name"].str.startswith("gloo:"), "tid"]) if len(ann) else set()
        cpu = trace.cpu_ops
        rows = cpu[cpu["name"].str.startswith("aten::") & ~cpu["tid"].isin(gloo_threads)]
    starts = rows["ts_us"].to_numpy(float)
    spans = np.column_stack([starts, starts + rows["dur_us"].to_numpy(float)])
    return spans[in_windows(starts, windows)]


# ------------------------------------------------------------
# Compute/communication overlap by interval arithmetic on one device's timeline.
#
# Communication is hidden when a compute kernel runs on the same device at the same time
# (DDP all-reduces gradient buckets while backward continues). What is not hidden is
# exposed: the step waits for it. Intervals are [start, end) in µs; every function is pure.

@dataclass(frozen=True)
class Overlap:
    comm_s: float  # sum of communication durations (calls on several streams may overlap)
    comm_busy_s: float  # union of communication intervals: time when any collective ran
    overlapped_s: float  # part of comm_busy_s during which compute also ran
    exposed_s: float  # comm_busy_s - overlapped_s: communication nothing hid
    overlap_frac: float  # overlapped_s / comm_busy_s; NaN without communication


def merge_intervals(spans: np.ndarray) -> np.ndarray:
    """Union of [start, end) intervals as sorted, disjoint intervals ([[0,2],[1,3]] → [[0,3]])."""
    spans = np.asarray(spans, dtype=float).reshape(-1, 2)
    spans = spans[spans[:, 1] > spans[:, 0]]
    if not len(spans):
        return spans
    spans = spans[np.argsort(spans[:, 0], kind="stable")]
    run_end = np.maximum.accumulate(spans[:, 1])
    new_block = np.concatenate([[True], spans[1:, 0] > run_end[:-1]])
    block = np.cumsum(new_block) - 1
    ends = np.zeros(block[-1] + 1)
    np.maximum.at(ends, block, run_end)
    return np.column_stack([spans[new_block, 0], ends])


def covered_length(spans: np.ndarray) -> float:
    """Length of the union of the intervals (each instant counted once)."""
    merged = merge_intervals(spans)
    return float((merged[:, 1] - merged[:, 0]).sum()) if len(merged) else 0.0


def intersection_length(a: np.ndarray, b: np.ndarray) -> float:
    """Length of (∪a) ∩ (∪b), by inclusion–exclusion: |A| + |B| − |A ∪ B|."""
    a = np.asarray(a, dtype=float).reshape(-1, 2)
    b = np.asarray(b, dtype=float).reshape(-1, 2)
    both = covered_length(a) + covered_length(b) - covered_length(np.concatenate([a, b]))
    return max(both, 0.0)  # NB: float rounding can leave a tiny negative


def comm_overlap(comm_us: np.ndarray, compute_us: np.ndarray) -> Overlap:
    """How much of the communication time the compute intervals hide (inputs in µs)."""
    comm_us = np.asarray(comm_us, dtype=float).reshape(-1, 2)
    compute_us = np.asarray(compute_us, dtype=float).reshape(-1, 2)
    # Trace timestamps are ~1e12 µs; measuring from the first event keeps sub-ns precision.
    origin = min([x[:, 0].min() for x in (comm_us, compute_us) if len(x)], default=0.0)
    comm_us, compute_us = comm_us - origin, compute_us - origin
    comm_s = float((comm_us[:, 1] - comm_us[:, 0]).sum()) * 1e-6
    busy_s = covered_length(comm_us) * 1e-6
    overlapped_s = min(intersection_length(comm_us, compute_us) * 1e-6, busy_s)
    frac = overlapped_s / busy_s if busy_s > 0 else float("nan")
    return Overlap(comm_s=comm_s, comm_busy_s=busy_s, overlapped_s=overlapped_s,
                   exposed_s=busy_s - overlapped_s, overlap_frac=frac)
