"""run.json's contents: the one builder of its schema, for profiled and imported runs.

Every writer of run.json (pipeline.py, distributed/assemble.py) and of rank.json (the same
schema plus "rank") writes `run_json(meta)`: the record's document (records/run.py), checked
for the keys every writer sets and their types.
"""
from __future__ import annotations

import platform
import sys
import time
from pathlib import Path
from typing import Any, Mapping

import torch

from kernel_advisor import __version__
from kernel_advisor.collect.attribute import Attribution
from kernel_advisor.collect.kernel_timing import PASS_KERNELS_ONLY, PASS_SHAPES, KernelTiming
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.noise import detect_noise
from kernel_advisor.collect.profiler import Capture, effective_dtype
from kernel_advisor.collect.step_time import StepTime, overhead_ratio, step_time_estimate, trace_span_step_time
from kernel_advisor.collect.trace import TraceData, shapes_recorded
from kernel_advisor.records.run import SCHEMA_VERSION, RunMeta, RunRecord

FILES = {"ops": "ops.csv", "sequence": "sequence.csv", "trace": "trace.json.gz"}


def run_json(meta: Mapping[str, Any]) -> dict[str, Any]:
    """What run.json holds for `meta`: RunRecord.build(meta).to_json() (ValueError when a key
    every writer sets is missing or of the wrong type: a bug here, not the user's input)."""
    return RunRecord.build(meta).to_json()


def _common_meta(attr: Attribution, source: str, args: dict) -> dict:
    wall = sum(attr.step_wall_s)
    return {
        "schema_version": SCHEMA_VERSION, "tool_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "source": source,
        "args": args, "steps": attr.steps, "step_markers": attr.step_markers or None,
        "trace_step_wall_s": list(attr.step_wall_s),
        "step_device_time_s": list(attr.step_device_time_s),
        "total_device_time_s": attr.total_device_time_s,
        "device_busy_s": attr.device_busy_s,
        "device_busy_frac": min(attr.device_busy_s / wall, 1.0) if wall > 0 else 0.0,
        "files": dict(FILES),
    }


def profile_meta(loaded: LoadedModel, args: dict, cap: Capture, attr: Attribution,
                 timing: KernelTiming | None = None) -> RunMeta:
    """`timing`: how the timing pass went (None: there was none). When its durations were used,
    its steps are the profiled steps every figure (overhead, device busy) compares against."""
    meta = _common_meta(attr, "profile", args)
    timed_apart = timing is not None and timing.source == PASS_KERNELS_ONLY
    profiled = cap.timing_step_wall_s if timed_apart else cap.step_wall_s
    # The timing pass's steps against the unprofiled ones timed right before and after it (collect/profiler.py).
    unprofiled = cap.timing_unprofiled_step_wall_s if timed_apart else cap.unprofiled_step_wall_s
    overhead = overhead_ratio(profiled, unprofiled)
    meta.update({
        "model": {"file": str(loaded.path), "sha256": loaded.sha256, "entry": loaded.entry},
        "device": device_info(loaded.device), "versions": versions(),
        "settings": numerics_settings(args["mode"], args["dtype"], effective_dtype(loaded)),
        "step_wall_s": list(profiled), "unprofiled_step_wall_s": list(cap.unprofiled_step_wall_s),
        # The one step time every command quotes (collect/step_time.py).
        "step_s": _json_or_none(step_time_estimate(profiled, cap.unprofiled_step_wall_s, cap.loop_step_s)),
        "loop_step_s": list(cap.loop_step_s), "loop_window_steps": cap.loop_window_steps,
        "steady_state": _json_or_none(cap.steady_state),
        "profiler_overhead_ratio": overhead.value if overhead is not None else cap.profiler_overhead_ratio,
        "profiler_overhead": _json_or_none(overhead),
        # Whether the machine was quiet enough to time on (collect/noise.py): causes, figures, thresholds.
        "noise": detect_noise(step_time_estimate(profiled, cap.unprofiled_step_wall_s, cap.loop_step_s), profiled,
                              overhead, cap.load, cap.extra_windows).to_json(),
        "kernel_timing": _kernel_timing_json(cap, timing),
        "peak_memory_bytes": cap.peak_memory_bytes, "peak_memory_kind": cap.peak_memory_kind,
        "nonfinite_outputs": list(cap.nonfinite_outputs),
    })
    if timed_apart and sum(profiled) > 0:  # busy over the steps that timed it
        meta.update(device_busy_frac=min(attr.device_busy_s / sum(profiled), 1.0))
    return RunMeta(meta)


def _kernel_timing_json(cap: Capture, timing: KernelTiming | None) -> dict:
    """Which pass timed the kernels; with a timing pass, the shapes pass's own steps and overhead too."""
    if timing is None:
        return KernelTiming(PASS_SHAPES, 0).to_json()
    shapes_overhead = overhead_ratio(cap.step_wall_s, cap.unprofiled_step_wall_s)
    return {**timing.to_json(), "unprofiled_step_wall_s": list(cap.timing_unprofiled_step_wall_s),
            "shapes_pass_step_wall_s": list(cap.step_wall_s), "shapes_pass_overhead": _json_or_none(shapes_overhead)}


def import_meta(trace: TraceData, trace_path: Path, args: dict, attr: Attribution, device_type: str) -> RunMeta:
    meta = _common_meta(attr, "import", args)
    props = (trace.device_properties or [{}])[0] if device_type == "cuda" else {}
    meta.update({
        "model": {"file": str(trace_path), "sha256": None, "entry": None},
        "device": _imported_device(props, device_type),
        "versions": {"trace_schema": trace.trace_schema_version, "cuda_runtime": trace.cuda_runtime_version,
                     "cuda_driver": trace.cuda_driver_version},
        # Unknown for a foreign trace: the rules treat None as "not recorded".
        "settings": {"allow_tf32_matmul": None, "allow_tf32_cudnn": None, "float32_matmul_precision": None,
                     "cudnn_benchmark": None, "mode": args.get("mode"), "dtype": "keep",
                     "effective_dtype": ""},
        "step_wall_s": list(attr.step_wall_s), "unprofiled_step_wall_s": [],
        "step_s": _json_or_none(_imported_step_time(attr)), "steady_state": None,
        "profiler_overhead_ratio": None, "profiler_overhead": None, "noise": None, "peak_memory_bytes": None,
        "nonfinite_outputs": [],
        "shapes_recorded": shapes_recorded(trace),  # False: nothing could be costed (record_shapes=False)
    })
    return RunMeta(meta)


def _imported_step_time(attr: Attribution) -> StepTime | None:
    """Marked steps: their median (profiled: the trace was recorded under a profiler); no markers:
    the whole trace's span over the steps it was said to hold (import --steps, else 1)."""
    if attr.step_markers:
        return step_time_estimate(attr.step_wall_s, None)
    return trace_span_step_time(sum(attr.step_wall_s), attr.steps)


def _json_or_none(value) -> dict | None:
    return None if value is None else value.to_json()


def _imported_device(props: dict, device_type: str) -> dict:
    if device_type != "cuda":
        return {"type": "cpu", "name": "cpu (imported trace)", "capability": None, "sm_count": None,
                "l2_bytes": None, "total_memory_bytes": None, "driver": ""}
    cap = [props.get("computeMajor"), props.get("computeMinor")]
    return {"type": "cuda", "name": props.get("name", "unknown GPU"),
            "capability": cap if None not in cap else None, "sm_count": props.get("numSms"),
            "l2_bytes": None, "total_memory_bytes": props.get("totalGlobalMem"), "driver": ""}


# ------------------------------------------------------------
# What a run records about the machine and the numerics settings it ran under.

def device_info(dev: torch.device) -> dict:
    if dev.type == "cuda":
        props = torch.cuda.get_device_properties(dev)
        return {"type": "cuda", "name": props.name, "capability": [props.major, props.minor],
                "sm_count": props.multi_processor_count,
                "l2_bytes": int(getattr(props, "L2_cache_size", 0)),
                "total_memory_bytes": int(props.total_memory), "driver": driver_version()}
    return {"type": "cpu", "name": cpu_name(), "capability": None, "sm_count": None,
            "l2_bytes": None, "total_memory_bytes": None, "driver": ""}


def driver_version() -> str:
    proc = Path("/proc/driver/nvidia/version")
    if proc.is_file():
        for word in proc.read_text(errors="replace").split():
            if word.count(".") >= 1 and word.replace(".", "").isdigit():
                return word
    try:
        import pynvml  # nvidia-ml-py, optional

        pynvml.nvmlInit()
        return str(pynvml.nvmlSystemGetDriverVersion())
    except Exception:  # noqa: BLE001 - driver version is informative only
        return ""


def cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "cpu"


def versions() -> dict:
    try:
        import triton

        triton_version = triton.__version__
    except Exception:  # noqa: BLE001 - triton is optional
        triton_version = None
    return {"python": platform.python_version(), "torch": torch.__version__,
            "triton": triton_version, "cuda": torch.version.cuda,
            "platform": sys.platform}


def numerics_settings(mode: str, dtype: str, effective_dtype: str) -> dict:
    return {
        "allow_tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
        "allow_tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "mode": mode, "dtype": dtype, "effective_dtype": effective_dtype,
    }
