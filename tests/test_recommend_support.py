"""Builders for synthetic runs (op table, op sequence, run.json) used by the recommend tests.

Derived columns follow docs/architecture.md exactly: mean = time / calls, efficiency =
roofline / mean, headroom = time − calls × roofline, share from the table total.
No tests live here.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

H200_BW = 4.8e12  # bytes/s (datasheet figure, any consistent number works for the arithmetic)
H200_BF16 = 989e12
STEPS = 2


def op_row(row_id: int, name: str, shapes: list, dtypes: list, calls: int, time_s: float, *,
           flops: float | None = None, nbytes: float | None = None,
           verdict: str = "memory-bound", compute_path: str = "fp32", peak: float = 51e12,
           bw: float = H200_BW, kernel_count: int | None = None, kind: str = "op",
           strides: list | None = None, region: str = "") -> dict[str, Any]:
    """One ops.csv row; modelled when flops and nbytes are given (roofline = max(F/peak, B/bw))."""
    mean_s = time_s / calls
    kernels = calls if kernel_count is None else kernel_count
    modelled = flops is not None and nbytes is not None
    roofline_s = max(flops / peak, nbytes / bw) if modelled else None
    nan = float("nan")
    return {
        "row_id": row_id, "name": name, "kind": kind, "input_shapes": shapes, "input_dtypes": dtypes,
        "input_strides": strides or [], "concrete_inputs": [], "calls": calls, "device_time_total_s": time_s,
        "device_time_per_step_s": time_s / STEPS, "device_time_per_call_s": mean_s, "cpu_time_total_s": time_s,
        "kernels": [], "kernel_count": kernels, "kernel_time_per_launch_s": time_s / kernels if kernels else 0.0,
        "max_blocks": 132, "first_seq": 0, "region": region, "modelled": modelled,
        "flops_per_call": flops if flops is not None else nan, "bytes_per_call": nbytes if nbytes is not None else nan,
        "intensity": (flops / nbytes) if flops and nbytes else nan, "compute_path": compute_path,
        "peak_flops_per_s": peak, "bandwidth_bytes_per_s": bw,
        "roofline_per_call_s": roofline_s if modelled else nan,
        "achieved_flops_per_s": flops / mean_s if flops is not None else nan,
        "achieved_bytes_per_s": nbytes / mean_s if nbytes is not None else nan,
        "efficiency_frac": roofline_s / mean_s if modelled else nan,
        "headroom_total_s": time_s - calls * roofline_s if modelled else nan,
        "verdict": verdict,
    }


def op_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    df["share_pct"] = 100.0 * df["device_time_total_s"] / df["device_time_total_s"].sum()
    return df


def seq_entry(seq: int, step: int, name: str, row_id: int, shapes: list, dtypes: list, time_s: float,
              region: str = "") -> dict[str, Any]:
    return {"seq": seq, "step": step, "name": name, "row_id": row_id, "input_shapes": shapes,
            "input_dtypes": dtypes, "device_time_per_call_s": time_s, "start_us": float(seq), "region": region}


def sequence_from(ops: list[tuple[str, int, list, list, float]], steps: int = STEPS,
                  region: str = "") -> pd.DataFrame:
    """`ops` is one step: (name, row_id, shapes, dtypes, time_s); repeated for every step."""
    entries = []
    for step in range(steps):
        for name, row_id, shapes, dtypes, time_s in ops:
            entries.append(seq_entry(len(entries), step, name, row_id, shapes, dtypes, time_s, region))
    return pd.DataFrame(entries)


def run_meta(*, total_device_time_s: float, step_wall_s: float, device_type: str = "cuda",
             capability: list | None = None, allow_tf32: bool = False, mode: str = "inference",
             busy_s: float | None = None, cudnn_benchmark: bool = False, steps: int = STEPS,
             ceilings: dict | None = None, model_file: str = "examples/model.py") -> dict[str, Any]:
    return {
        "schema_version": 2, "tool_version": "0.1.0", "source": "profile",
        "model": {"file": model_file, "sha256": "0" * 64, "entry": None},
        "args": {"device": device_type, "mode": mode, "dtype": "keep", "warmup": 1, "steps": steps, "seed": 0},
        "device": {"type": device_type, "name": "NVIDIA H200" if device_type == "cuda" else "cpu",
                   "capability": capability if capability is not None else ([9, 0] if device_type == "cuda" else None)},
        "settings": {"allow_tf32_matmul": allow_tf32, "allow_tf32_cudnn": True,
                     "float32_matmul_precision": "high" if allow_tf32 else "highest",
                     "cudnn_benchmark": cudnn_benchmark, "mode": mode, "dtype": "keep"},
        "steps": steps, "step_wall_s": [step_wall_s] * steps, "unprofiled_step_wall_s": [step_wall_s] * steps,
        "total_device_time_s": total_device_time_s,
        "device_busy_s": total_device_time_s if busy_s is None else busy_s,
        "ceilings": ceilings or {"source": "datasheet"},
    }


def write_run_dir(path: Path, ops: pd.DataFrame, sequence: pd.DataFrame, meta: dict[str, Any]) -> Path:
    """A run directory as `advisor profile` writes it (JSON columns as JSON text)."""
    path.mkdir(parents=True, exist_ok=True)
    json_cols = ("input_shapes", "input_dtypes", "input_strides", "concrete_inputs", "kernels")
    for name, df in (("ops.csv", ops), ("sequence.csv", sequence)):
        out = df.copy()
        for col in json_cols:
            if col in out:
                out[col] = [json.dumps(v) for v in out[col]]
        out.to_csv(path / name, index=False)
    (path / "run.json").write_text(json.dumps(meta), encoding="utf-8")
    return path


# ---------------------------------------------------------------- a small fp32 scenario

F32 = "float32"
BW = 4e12
PEAKS = {"fp32": 50e12, "tf32": 400e12, "bf16_tc": 800e12, "fp16_tc": 800e12}
CEILINGS = {"peak_flops_per_s": PEAKS, "bandwidth_bytes_per_s": BW}
LINEAR = ("aten::linear", [[1024, 512], [2048, 512], [2048]], [F32] * 3)
SOFTMAX = ("aten::softmax", [[8, 16, 128, 128], [], []], [F32, "", ""])
ADD = ("aten::add", [[64], [64]], [F32, F32])


def fp32_run(*, device_type: str = "cuda", allow_tf32: bool = False):
    """Per step: linear 4 ms (2 calls, 20 % of its roof), softmax 1 ms (1 % of its roof), add 0.05 ms;
    a 6 ms step. Returns (ops, sequence, meta)."""
    path = "tf32" if allow_tf32 else "fp32"
    rows = [op_row(0, *LINEAR, 4, 8e-3, flops=20e9, nbytes=40e6, verdict="compute-bound",
                   compute_path=path, peak=PEAKS[path], bw=BW),
            op_row(1, *SOFTMAX, 2, 2e-3, flops=0.0, nbytes=40e6, bw=BW),
            op_row(2, *ADD, 2, 1e-4, flops=64.0, nbytes=768.0, verdict="latency-bound", bw=BW)]
    ops = op_table(rows)
    seq = sequence_from([(LINEAR[0], 0, LINEAR[1], LINEAR[2], 2e-3), (LINEAR[0], 0, LINEAR[1], LINEAR[2], 2e-3),
                         (SOFTMAX[0], 1, SOFTMAX[1], SOFTMAX[2], 1e-3), (ADD[0], 2, ADD[1], ADD[2], 5e-5)])
    meta = run_meta(total_device_time_s=10.1e-3, step_wall_s=6e-3, device_type=device_type,
                    allow_tf32=allow_tf32, ceilings=CEILINGS)
    return ops, seq, meta


# A valid user rule file: fires on a softmax row above 10 % of device time, claims 25 % of it.
USER_RULE = """\
version: 1
rules:
  - id: team-softmax-budget
    title: Softmax over budget
    tier: library
    conditions: {ops: [aten::softmax], share_pct: {min: 10}}
    message: "{name} takes {share_pct:.1f} % of device time"
    gain: {model: fraction, value: 0.25}
"""
