"""Synthetic run directories for tests, written to the contract in docs/architecture.md.

`write_run(path, [OpSpec(...), ...])` gives a complete, analyzed run (run.json, ops.csv,
sequence.csv) whose analyze columns follow the documented definitions, so tests can work
out the expected numbers by hand. Other engineers' tests may reuse it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from kernel_advisor.collect.rundir import SCHEMA_VERSION, RunWriter, write_json_atomic, write_table

PATHS = ("fp64", "fp32", "tf32", "fp16_tc", "bf16_tc", "fp8_tc")
# The H200 SXM datasheet row of data/devices.yaml, as Ceilings.to_dict() writes it.
H200_PEAKS_FLOPS_PER_S = {"fp64": 67e12, "fp32": 67e12, "tf32": 494.5e12, "fp16_tc": 989.5e12,
                          "bf16_tc": 989.5e12, "fp8_tc": 1979e12}
H200_BANDWIDTH_BYTES_PER_S = 4.8e12


def h200_ceilings() -> dict:
    return {"device_name": "NVIDIA H200", "peak_flops_per_s": dict(H200_PEAKS_FLOPS_PER_S),
            "bandwidth_bytes_per_s": H200_BANDWIDTH_BYTES_PER_S, "l2_bytes": 60 * 2**20, "sm_count": 132,
            "source": "datasheet", "native_paths": list(PATHS),
            "origins": {"bandwidth": "datasheet", "l2": "datasheet", "sm_count": "datasheet",
                        **{p: "datasheet" for p in PATHS}}}


@dataclass(frozen=True)
class OpSpec:
    """One ops.csv row; flops/bytes are per call, None = unmodelled."""

    name: str
    shapes: list
    dtypes: list
    calls: int
    device_time_total_s: float
    region: str = ""
    flops: float | None = None
    bytes: float | None = None
    compute_path: str = ""
    verdict: str = "unknown"
    kind: str = "op"
    kernels: list = field(default_factory=list)


def _analysis(op: OpSpec, ceilings: dict) -> dict:
    mean_s = op.device_time_total_s / op.calls
    if op.flops is None:
        nan = math.nan
        return {"modelled": False, "flops_per_call": nan, "bytes_per_call": nan, "intensity": nan,
                "compute_path": "", "peak_flops_per_s": nan, "bandwidth_bytes_per_s": nan, "roofline_per_call_s": nan,
                "achieved_flops_per_s": nan, "achieved_bytes_per_s": nan, "efficiency_frac": nan,
                "headroom_total_s": nan, "verdict": "unknown"}
    peak = ceilings["peak_flops_per_s"][op.compute_path]
    bandwidth = ceilings["bandwidth_bytes_per_s"]
    roofline_s = max(op.flops / peak, op.bytes / bandwidth)
    return {"modelled": True, "flops_per_call": op.flops, "bytes_per_call": op.bytes,
            "intensity": op.flops / op.bytes if op.bytes else math.nan, "compute_path": op.compute_path,
            "peak_flops_per_s": peak, "bandwidth_bytes_per_s": bandwidth, "roofline_per_call_s": roofline_s,
            "achieved_flops_per_s": op.flops / mean_s, "achieved_bytes_per_s": op.bytes / mean_s,
            "efficiency_frac": roofline_s / mean_s,
            "headroom_total_s": op.device_time_total_s - op.calls * roofline_s,
            "verdict": op.verdict}


def ops_frame(ops: list[OpSpec], steps: int, ceilings: dict) -> pd.DataFrame:
    total_s = sum(op.device_time_total_s for op in ops)
    rows = []
    for row_id, op in enumerate(ops):
        rows.append({
            "row_id": row_id, "name": op.name, "kind": op.kind, "input_shapes": op.shapes,
            "input_dtypes": op.dtypes, "input_strides": [], "concrete_inputs": [], "calls": op.calls,
            "device_time_total_s": op.device_time_total_s, "device_time_per_step_s": op.device_time_total_s / steps,
            "device_time_per_call_s": op.device_time_total_s / op.calls,
            "share_pct": 100 * op.device_time_total_s / total_s if total_s else 0.0,
            "cpu_time_total_s": op.device_time_total_s * 0.5, "kernels": op.kernels, "kernel_count": op.calls,
            "kernel_time_per_launch_s": op.device_time_total_s / op.calls, "max_blocks": 264, "first_seq": row_id,
            "region": op.region, **_analysis(op, ceilings)})
    frame = pd.DataFrame(rows)
    return frame.sort_values("device_time_total_s", ascending=False, kind="stable") if rows else frame


def sequence_frame(ops: list[OpSpec], steps: int) -> pd.DataFrame:
    rows, seq = [], 0
    for step in range(steps):
        for row_id, op in enumerate(ops):
            for _ in range(max(op.calls // steps, 1)):
                rows.append({"seq": seq, "step": step, "name": op.name, "row_id": row_id,
                             "input_shapes": op.shapes, "input_dtypes": op.dtypes,
                             "device_time_per_call_s": op.device_time_total_s / op.calls, "start_us": 10.0 * seq,
                             "region": op.region})
                seq += 1
    return pd.DataFrame(rows, columns=["seq", "step", "name", "row_id", "input_shapes", "input_dtypes",
                                       "device_time_per_call_s", "start_us", "region"])


def run_meta(steps: int, step_wall_s: list[float], ceilings: dict | None, total_device_time_s: float,
             **overrides) -> dict:
    meta = {
        "schema_version": SCHEMA_VERSION, "tool_version": "0.1.0", "created": "2026-11-21T09:00:00Z",
        "source": "profile", "model": {"file": "examples/gpt_block.py", "sha256": "ab" * 32, "entry": None},
        "args": {"device": "cuda", "mode": "inference", "dtype": "bfloat16", "warmup": 3, "steps": steps,
                 "seed": 0},
        "device": {"type": "cuda", "name": "NVIDIA H200", "capability": [9, 0], "sm_count": 132,
                   "l2_bytes": 62914560, "total_memory_bytes": 150109880320, "driver": "580.159.04"},
        "versions": {"python": "3.12.3", "torch": "2.11.0+cu130", "triton": "3.6.0", "cuda": "13.0"},
        "settings": {"allow_tf32_matmul": False, "allow_tf32_cudnn": True, "float32_matmul_precision": "highest",
                     "cudnn_benchmark": False, "mode": "inference", "dtype": "bfloat16"},
        "steps": steps, "step_wall_s": step_wall_s, "unprofiled_step_wall_s": [w * 0.97 for w in step_wall_s],
        "profiler_overhead_ratio": 1.03, "peak_memory_bytes": 3 * 2**30,
        "total_device_time_s": total_device_time_s, "device_busy_s": 0.9 * total_device_time_s,
        "device_busy_frac": 0.82, "coverage": {"modelled_time_pct": 97.1, "unmodelled": []},
        "files": {"ops": "ops.csv", "sequence": "sequence.csv", "trace": "trace.json.gz"},
    }
    if ceilings is not None:
        meta["ceilings"] = ceilings
    meta.update(overrides)
    return meta


def write_run(path: Path, ops: list[OpSpec], steps: int = 2, step_wall_s: list[float] | None = None,
              ceilings: dict | None = None, recommendations=None, try_kernel=None,
              analyzed: bool = True, **meta_overrides) -> Path:
    """A complete run directory at `path` (not made `latest`)."""
    ceilings = h200_ceilings() if ceilings is None and analyzed else ceilings
    frame = ops_frame(ops, steps, ceilings or h200_ceilings())
    if not analyzed:
        frame = frame.drop(columns=[c for c in _analysis(ops[0], h200_ceilings()) if c in frame])
    total_s = sum(op.device_time_total_s for op in ops)
    meta = run_meta(steps, step_wall_s or [0.005] * steps, ceilings, total_s, **meta_overrides)
    with RunWriter(Path(path), update_latest=False) as tmp:
        write_table(tmp / "ops.csv", frame)
        write_table(tmp / "sequence.csv", sequence_frame(ops, steps))
        write_json_atomic(tmp / "run.json", meta)
        if recommendations is not None:
            write_json_atomic(tmp / "recommendations.json", recommendations)
        if try_kernel is not None:
            write_json_atomic(tmp / "try_kernel.json", try_kernel)
    return Path(path)


# ---------------------------------------------------------------- a small GPT-like run
# Run A, 2 steps, 4.0 ms of device time in all (2.0 ms per step). Shares: linear 50 %,
# softmax 30 %, layer_norm 10 %, add 5 %, copy_ 2.5 % (0 FLOP), fused_rope 2.5 % (unmodelled).
BF16_ACT = [8, 512, 4096]


def gpt_like_ops(region_name: str = "attn", op_name: str = "mylib::fused_rope") -> list[OpSpec]:
    return [
        OpSpec("aten::linear", [BF16_ACT, [4096, 4096], [4096]], ["bfloat16"] * 3, 4, 2.0e-3, region_name,
               flops=1.37e11, bytes=1.0e8, compute_path="bf16_tc", verdict="compute-bound"),
        OpSpec("aten::_softmax", [[8, 16, 512, 512], [], []], ["bfloat16", "scalar", "scalar"], 2, 1.2e-3,
               region_name, flops=1.68e8, bytes=1.34e8, compute_path="fp32", verdict="memory-bound"),
        OpSpec("aten::layer_norm", [BF16_ACT, [4096], [4096]], ["bfloat16"] * 3, 2, 0.4e-3, "mlp",
               flops=1.34e8, bytes=6.7e7, compute_path="fp32", verdict="memory-bound"),
        OpSpec("aten::add", [BF16_ACT, BF16_ACT], ["bfloat16"] * 2, 2, 0.2e-3, "mlp",
               flops=1.67e7, bytes=1.0e8, compute_path="fp32", verdict="latency-bound"),
        OpSpec("aten::copy_", [BF16_ACT, BF16_ACT], ["bfloat16"] * 2, 2, 0.1e-3,
               flops=0.0, bytes=6.7e7, compute_path="fp32", verdict="memory-bound"),
        OpSpec(op_name, [BF16_ACT], ["bfloat16"], 2, 0.1e-3, region_name),
    ]


def recommendations_doc(softmax_row_id: int = 1) -> dict:
    """recommendations.json as `advisor recommend --measure` writes it (two findings, one measured)."""
    measured = {"status": "passed", "reason": "", "applied": "triton-softmax (aten::_softmax)",
                "speedup": {"value": 1.21, "low": 1.18, "high": 1.24}, "gain_frac": 0.174, "verdict": "faster",
                "step_s": {"value": 1.9e-3, "low": 1.85e-3, "high": 1.95e-3}, "gate": None}
    return {
        "schema_version": 3, "step_s": 0.0023, "total_estimated_gain_per_step_s": 5e-4,
        "run": {"dir": None, "model": "model.py"}, "findings": [], "hotspots": [],
        "plan": {"actions": ["kernel:triton-softmax"], "rules": ["fuse-softmax"], "measured": measured},
        "recommendations": [
            {"rank": 1, "rule_id": "fuse-softmax", "tier": "triton", "title": "Fuse the softmax",
             "scope": "op", "subject": f"row:{softmax_row_id}", "label": "aten::_softmax 8×16×512×512",
             "row_ids": [softmax_row_id], "message": "softmax reads its input twice <b>not bold</b>",
             "estimated_gain_per_step_s": 4e-4, "estimated_gain_frac": 0.174,
             "row_gain_per_step_s": {str(softmax_row_id): 4e-4}, "gain_model": "memory-roof",
             "gain_basis": "bytes at 4.8 TB/s", "thresholds": [
                 {"key": "verdict", "expected": "memory-bound", "actual": "memory-bound", "ok": True},
                 {"key": "share_pct", "expected": ">= 5", "actual": 30.0, "ok": True}],
             "evidence": {"row_id": softmax_row_id, "time_per_step_s": 6e-4, "efficiency_frac": 0.05},
             "kernel_id": "triton-softmax", "command": "advisor try-kernel --kernel triton-softmax",
             "references": ["Liger-Kernel fused softmax"], "caveats": ["forward only"], "source": "builtin",
             "action": "kernel:triton-softmax", "action_reason": "", "measured": measured},
            {"rank": 2, "rule_id": "tf32-matmul", "tier": "library", "title": "Allow TF32 matmuls",
             "scope": "run", "subject": "run", "label": "whole run", "row_ids": [],
             "message": "torch.backends.cuda.matmul.allow_tf32 is off", "estimated_gain_per_step_s": 1e-4,
             "estimated_gain_frac": 0.0435, "row_gain_per_step_s": {}, "gain_model": "none", "gain_basis": "",
             "thresholds": [], "evidence": {"allow_tf32_matmul": False}, "kernel_id": None, "command": None,
             "references": [], "caveats": [], "source": "builtin", "action": "tf32", "action_reason": "",
             "measured": {"status": "not-applied", "reason": "TF32 is already on", "applied": "", "speedup": None,
                          "gain_frac": None, "verdict": "", "step_s": None, "gate": None}},
        ],
    }


def try_kernel_doc() -> dict:
    """try_kernel.json as trykernel/results.py writes it: eager baseline, a passing and a failing candidate."""
    def variant(name, kind, status, step_s, speedup=None, reason="", gate=None, op=None, prediction=None):
        return {"name": name, "kind": kind, "kernel_ids": [], "targets": ["aten::_softmax"], "status": status,
                "reason": reason, "calls": 4, "fallback_calls": 0, "fallback_reasons": [], "gate": gate,
                "timing_label": "CUDA events", "step_s": step_s, "speedup": speedup, "verdict": "",
                "op": op, "peak_memory_bytes": 3 * 2**30, "prediction": prediction, "suspect": "", "compile_s": None}
    gate = {"status": "passed", "reason": "", "draws": 3, "leaves": 1, "max_abs_err": 1e-3, "rel_err": 2e-3,
            "ref_rel_err": 3e-3, "baseline_ref_rel_err": 2.5e-3, "worst_leaf": "out"}
    return {"schema_version": 1, "model": "examples/gpt_block.py", "device": "NVIDIA H200", "mode": "inference",
            "dtype": "bfloat16", "timing": "CUDA events", "float64_reference": "",
            "variants": [
                variant("eager", "eager", "baseline", {"value": 2.3e-3, "low": 2.2e-3, "high": 2.4e-3}),
                variant("triton-softmax", "candidate", "passed", {"value": 1.9e-3, "low": 1.85e-3, "high": 1.95e-3},
                        {"value": 1.21, "low": 1.18, "high": 1.24}, gate=gate,
                        op={"names": ["aten::_softmax"], "variant_s": 2e-4, "baseline_s": 6e-4, "speedup": 3.0},
                        prediction={"predicted_gain_frac": 0.174, "source": "recommendations.json",
                                    "measured_gain_frac": 0.174}),
                variant("cuda-softmax", "candidate", "FAILED", None, reason="nvcc was not found"),
            ],
            "notes": ["timings are medians of 20 interleaved rounds"]}
