"""From a model file or a foreign trace to a complete run directory."""
from __future__ import annotations

import gzip
import shutil
import tempfile
import time
from pathlib import Path

from kernel_advisor import __version__
from kernel_advisor.analyze.apply import analyze_ops
from kernel_advisor.collect.attribute import Attribution, attribute
from kernel_advisor.collect.environment import device_info, numerics_settings, versions
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.profiler import Capture, Progress, capture, effective_dtype
from kernel_advisor.collect.rundir import (SCHEMA_VERSION, RunWriter, check_writable_target, write_error,
                                           write_json_atomic, write_table)
from kernel_advisor.collect.trace_reader import TraceData, read_trace
from kernel_advisor.errors import UserInputError

FILES = {"ops": "ops.csv", "sequence": "sequence.csv", "trace": "trace.json.gz"}


def profile_to_run(loaded: LoadedModel, args: dict, out_dir: Path,
                   progress: Progress | None = None) -> tuple[Path, dict]:
    """Profile, attribute, analyze and write a run; returns (run dir, run.json contents)."""
    check_writable_target(out_dir)  # before minutes of profiling, not after
    with tempfile.TemporaryDirectory(prefix="advisor-") as work:
        cap = capture(loaded, args["mode"], args["warmup"], args["steps"], Path(work), progress)
        trace = read_trace(cap.trace_path)
        attr = attribute(trace, loaded.device.type)
        meta = profile_meta(loaded, args, cap, attr)
        return _write_run(out_dir, attr, meta, cap.trace_path), meta


def import_to_run(trace_path: Path, args: dict, out_dir: Path) -> tuple[Path, dict]:
    check_writable_target(out_dir)
    trace = read_trace(trace_path)
    device_type = "cuda" if len(trace.gpu) else "cpu"
    attr = attribute(trace, device_type)
    if attr.ops.empty:  # an empty run would read as "0 s, 100 % modelled": say what is wrong instead
        raise UserInputError(f"{trace_path.name} holds no operator events to attribute",
                             "export the trace after the profiled steps ran, with record_shapes=True "
                             "(torch.profiler drops a cycle's events when the cycle ends)")
    meta = _import_meta(trace, trace_path, args, attr, device_type)
    return _write_run(out_dir, attr, meta, trace_path), meta


def _write_run(out_dir: Path, attr: Attribution, meta: dict, trace_src: Path) -> Path:
    ops, ceilings, cov = analyze_ops(attr.ops, meta)
    meta["ceilings"], meta["coverage"] = ceilings, cov
    with RunWriter(out_dir) as tmp:
        write_table(tmp / FILES["ops"], ops)
        write_table(tmp / FILES["sequence"], attr.sequence)
        try:
            _copy_gzipped(trace_src, tmp / FILES["trace"])
        except OSError as e:  # read_trace has just read the source: this is the write (disk full)
            raise write_error(out_dir, e) from None
        write_json_atomic(tmp / "run.json", meta)
    return out_dir


def _copy_gzipped(src: Path, dst: Path) -> None:
    with open(src, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    if gzipped:
        shutil.copyfile(src, dst)
        return
    with open(src, "rb") as f, gzip.open(dst, "wb", compresslevel=6) as g:
        shutil.copyfileobj(f, g, length=1 << 20)


def _common_meta(attr: Attribution, source: str, args: dict) -> dict:
    wall = sum(attr.step_wall_s)
    return {
        "schema_version": SCHEMA_VERSION, "tool_version": __version__,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "source": source,
        "args": args, "steps": len(attr.step_wall_s),
        "trace_step_wall_s": list(attr.step_wall_s),
        "step_device_time_s": list(attr.step_device_time_s),
        "total_device_time_s": attr.total_device_time_s,
        "device_busy_s": attr.device_busy_s,
        "device_busy_frac": min(attr.device_busy_s / wall, 1.0) if wall > 0 else 0.0,
        "files": dict(FILES),
    }


def profile_meta(loaded: LoadedModel, args: dict, cap: Capture, attr: Attribution) -> dict:
    meta = _common_meta(attr, "profile", args)
    meta.update({
        "model": {"file": str(loaded.path), "sha256": loaded.sha256, "entry": loaded.entry},
        "device": device_info(loaded.device), "versions": versions(),
        "settings": numerics_settings(args["mode"], args["dtype"], effective_dtype(loaded)),
        "step_wall_s": list(cap.step_wall_s), "unprofiled_step_wall_s": list(cap.unprofiled_step_wall_s),
        "profiler_overhead_ratio": cap.profiler_overhead_ratio,
        "peak_memory_bytes": cap.peak_memory_bytes, "peak_memory_kind": cap.peak_memory_kind,
        "nonfinite_outputs": list(cap.nonfinite_outputs),
    })
    return meta


def _import_meta(trace: TraceData, trace_path: Path, args: dict, attr: Attribution, device_type: str) -> dict:
    meta = _common_meta(attr, "import", args)
    props = (trace.meta.get("deviceProperties") or [{}])[0] if device_type == "cuda" else {}
    meta.update({
        "model": {"file": str(trace_path), "sha256": None, "entry": None},
        "device": _imported_device(props, device_type),
        "versions": {"trace_schema": trace.meta.get("schemaVersion"),
                     "cuda_runtime": trace.meta.get("cuda_runtime_version"),
                     "cuda_driver": trace.meta.get("cuda_driver_version")},
        # Unknown for a foreign trace: the rules treat None as "not recorded".
        "settings": {"allow_tf32_matmul": None, "allow_tf32_cudnn": None, "float32_matmul_precision": None,
                     "cudnn_benchmark": None, "mode": args.get("mode"), "dtype": "keep",
                     "effective_dtype": ""},
        "step_wall_s": list(attr.step_wall_s), "unprofiled_step_wall_s": [],
        "profiler_overhead_ratio": None, "peak_memory_bytes": None, "nonfinite_outputs": [],
    })
    return meta


def _imported_device(props: dict, device_type: str) -> dict:
    if device_type != "cuda":
        return {"type": "cpu", "name": "cpu (imported trace)", "capability": None, "sm_count": None,
                "l2_bytes": None, "total_memory_bytes": None, "driver": ""}
    cap = [props.get("computeMajor"), props.get("computeMinor")]
    return {"type": "cuda", "name": props.get("name", "unknown GPU"),
            "capability": cap if None not in cap else None, "sm_count": props.get("numSms"),
            "l2_bytes": None, "total_memory_bytes": props.get("totalGlobalMem"), "driver": ""}
