"""Communication in one rank's trace: which events are collectives, what they move, how fast.

GPU (NCCL): kernels whose name starts with `nccl`. torch.profiler annotates them with
"Collective name", "In msg nelems", "Out msg nelems", "Group size" and "dtype"; the
`record_param_comms` op that launched them carries the same keys and is the fallback.
CPU (gloo): a collective runs on gloo's worker threads as a `gloo:<collective>` range
with the tensor's dims and element type. Bandwidths follow NCCL's nccl-tests
conventions (https://github.com/NVIDIA/nccl-tests/blob/master/doc/PERFORMANCE.md).
"""
from __future__ import annotations

import gzip
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd

from kernel_advisor import dtypes
from kernel_advisor.collect.trace_reader import TraceData

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
COMM_OP_PREFIXES = ("c10d::", "record_param_comms", "nccl:", "gloo:")


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
    return name.lower().startswith("nccl")


def is_comm_op(name: str) -> bool:
    """CPU-side events of a collective: c10d ops, record_param_comms, nccl:/gloo: ranges."""
    return name.startswith(COMM_OP_PREFIXES)


def kernel_collective(name: str) -> str:
    """The collective an NCCL kernel implements, from its name: ncclDevKernel_AllReduce_Sum_f32_RING_LL."""
    parts = name.split("(")[0].split("_")
    return normalise_collective(parts[1]) if len(parts) > 1 else "other"


def itemsize_bytes(dtype: str) -> float:
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


# ---------------------------------------------------------------- reading a trace

# Where a communication event mentions itself: NCCL kernels, gloo ranges, and every event
# annotated with collective metadata (kernels and record_param_comms).
_ANCHOR = re.compile(rb'"name": "(?:nccl|gloo:)|"Collective name"')
_EVENT_START, _EVENT_END = b"\n  {", b"\n  }"  # kineto writes one event per block at indent 2


def _decompressed(path: Path) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def comm_events(path: Path) -> list[dict]:
    """The raw events of a chrome trace that describe communication, with their args.

    Only the events around an anchor are parsed (a trace of a million kernels holds a few
    hundred collectives); a trace not laid out the way kineto writes it is parsed whole.
    """
    text = _decompressed(Path(path))
    events: dict[int, dict] = {}
    for match in _ANCHOR.finditer(text):
        start = text.rfind(_EVENT_START, 0, match.start())
        end = text.find(_EVENT_END, match.end())
        if start in events:
            continue
        try:
            event = json.loads(text[start + 1:end + len(_EVENT_END)]) if start >= 0 and end >= 0 else None
        except json.JSONDecodeError:
            event = None
        if not isinstance(event, dict):
            return _all_comm_events(text)
        events[start] = event
    return list(events.values())


def _all_comm_events(text: bytes) -> list[dict]:
    doc = json.loads(text)
    raw = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
    return [e for e in raw if isinstance(e, dict) and _mentions_comm(e)]


def _mentions_comm(event: dict) -> bool:
    name = str(event.get("name", ""))
    return name.startswith(("nccl", "gloo:")) or "Collective name" in _args(event)


def windows_array(steps: pd.DataFrame) -> np.ndarray:
    """attribute.step_windows' [ts_us, end_us) table as an (n, 2) array."""
    return steps[["ts_us", "end_us"]].to_numpy(float).reshape(-1, 2)


def in_windows(ts_us: np.ndarray, windows: np.ndarray) -> np.ndarray:
    """True where a timestamp lies in one of the sorted [start, end) windows; all True without any."""
    if not len(windows):
        return np.ones(len(ts_us), dtype=bool)
    idx = np.searchsorted(windows[:, 0], ts_us, side="right") - 1
    ok = idx >= 0
    return ok & (ts_us < windows[np.clip(idx, 0, None), 1])


def _args(event: dict) -> dict:
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def _number(value) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _launch_args(events: list[dict]) -> dict[int, dict]:
    """External id → args of the CPU event that describes a collective (record_param_comms)."""
    out: dict[int, dict] = {}
    for e in events:
        args = _args(e)
        if e.get("cat") in ("cpu_op", "user_annotation") and "Collective name" in args:
            ext = args.get("External id")
            if ext is not None:
                out.setdefault(int(ext), args)
    return out


def _nccl_row(event: dict, described: dict, world_size: int) -> dict:
    args = _args(event)
    info = args if "Collective name" in args else described.get(int(args.get("External id", -1)), {})
    name = str(event["name"])
    collective = (normalise_collective(str(info["Collective name"])) if "Collective name" in info
                  else kernel_collective(name))
    group_recorded = _number(info.get("Group size"))
    group = world_size if math.isnan(group_recorded) else int(group_recorded)
    dtype = str(info.get("dtype", ""))
    size = message_bytes(collective, _number(info.get("In msg nelems")), _number(info.get("Out msg nelems")),
                         itemsize_bytes(dtype), group)
    return {"collective": collective, "name": name, "source": "nccl_kernel", "ts_us": float(event["ts"]),
            "dur_us": float(event.get("dur", 0.0)), "bytes": size, "group_size": group, "dtype": dtype,
            "stream": str(args.get("stream", ""))}


def _gloo_row(event: dict, world_size: int) -> dict:
    args = _args(event)
    collective = normalise_collective(str(event["name"]))
    dims = args.get("Input Dims") or []
    types = args.get("Input type") or []
    nelems = sum(float(np.prod(d)) for d in dims if isinstance(d, list) and d and
                 all(isinstance(x, int) for x in d))
    dtype = next((t for t in types if t), "")
    size = message_bytes(collective, nelems, math.nan, itemsize_bytes(dtype), world_size)
    return {"collective": collective, "name": str(event["name"]), "source": "gloo",
            "ts_us": float(event["ts"]), "dur_us": float(event.get("dur", 0.0)), "bytes": size,
            "group_size": world_size, "dtype": dtype, "stream": str(event.get("tid", ""))}


def comm_calls(events: list[dict], world_size: int, windows: np.ndarray,
               device_index: int | None = None) -> pd.DataFrame:
    """One row per collective call that starts in a profiled step (columns COMM_COLUMNS), by time.

    `device_index` keeps only the kernels of that GPU (a rank profiles its own device).
    """
    described = _launch_args(events)
    rows = []
    for e in events:
        if e.get("ph") != "X":
            continue
        name = str(e.get("name", ""))
        if e.get("cat") == "kernel" and is_comm_kernel(name):
            if device_index is None or _args(e).get("device") in (None, device_index):
                rows.append(_nccl_row(e, described, world_size))
        elif name.startswith("gloo:") and e.get("cat") in ("user_annotation", "cpu_op"):
            rows.append(_gloo_row(e, world_size))
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
