"""From a loaded model or a foreign trace to a complete run directory: the collect → analyze sequence.

It sits above both layers: collect reads and attributes the trace, analyze costs every op
and places it on the roofline; distributed ranks run the same `analyze_capture`.
"""
from __future__ import annotations

import gzip
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from kernel_advisor.analyze.apply import analyze_ops
# cost_arguments: rows split by every argument their cost reads
from kernel_advisor.analyze.costs import cost_arguments, modelled_op_names
from kernel_advisor.collect.attribute import Attribution, attribute
from kernel_advisor.collect.interrupts import hold_for_tests
from kernel_advisor.collect.kernel_timing import with_kernel_timings
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.profiler import Capture, Progress, capture
from kernel_advisor.collect.run_meta import FILES, import_meta, profile_meta, run_json
from kernel_advisor.collect.runner import no_operator_error
from kernel_advisor.collect.rundir import RunWriter, check_writable_target, write_error, write_json_atomic, write_table
from kernel_advisor.collect.trace import TraceData, read_trace
from kernel_advisor.errors import UserInputError
from kernel_advisor.records.run import RunMeta


@dataclass(frozen=True)
class Analyzed:
    """One profiled capture, attributed and costed: what a run directory is written from."""

    trace: TraceData
    attr: Attribution
    ops: pd.DataFrame  # analyzed: FLOPs, bytes, roofline
    meta: RunMeta  # run.json, ceilings and coverage included


_MODELLED = modelled_op_names()


def has_formula(name: str) -> bool:
    """The cost model prices `name` (collect hands a composite op without one to its children)."""
    return name in _MODELLED


def analyze_capture(loaded: LoadedModel, args: dict, cap: Capture) -> Analyzed:
    trace = read_trace(cap.trace_path)
    timing = None
    if cap.timing_trace_path is not None:
        trace, timing = with_kernel_timings(trace, read_trace(cap.timing_trace_path))
    attr = attribute(trace, loaded.device.type, cost_arguments=cost_arguments, priced=has_formula)
    meta = profile_meta(loaded, args, cap, attr, timing)
    ops, ceilings, coverage = analyze_ops(attr.ops, meta)
    meta = meta.with_keys(ceilings=ceilings, coverage=coverage)
    return Analyzed(trace, attr, ops, meta)


def profile_to_run(loaded: LoadedModel, args: dict, out_dir: Path,
                   progress: Progress | None = None) -> tuple[Path, dict]:
    """Profile, attribute, analyze and write a run; returns (run dir, run.json contents)."""
    check_writable_target(out_dir)  # before minutes of profiling, not after
    with tempfile.TemporaryDirectory(prefix="advisor-") as work:
        cap = capture(loaded, args["mode"], args["warmup"], args["steps"], Path(work), progress,
                      with_stack=bool(args.get("with_stack")))
        run = analyze_capture(loaded, args, cap)
        if run.attr.ops.empty:  # an empty table would read as "0 s, 100 % modelled", and become latest
            raise no_operator_error(loaded, args["mode"])
        run_dir = _write_run(out_dir, run.attr, run.ops, run.meta, cap.trace_path)
    hold_for_tests("run-kept")  # tests: Ctrl-C after the run is complete and `latest`
    return run_dir, run.meta


def import_to_run(trace_path: Path, args: dict, out_dir: Path,
                  finish: Callable[[Path, dict], None] | None = None) -> tuple[Path, dict]:
    """`args["steps"]` (import --steps; None when not given): the steps a trace without step
    markers holds, or the last marked steps to keep. `finish(tmp_dir, meta)` adds files and
    run.json keys of its own before run.json is written (a multi-rank import's ranks)."""
    check_writable_target(out_dir)
    trace = read_trace(trace_path)
    device_type = "cuda" if len(trace.gpu) else "cpu"
    attr = attribute(trace, device_type, cost_arguments=cost_arguments, steps_hint=args.get("steps"),
                     priced=has_formula)
    if attr.ops.empty:  # an empty run would read as "0 s, 100 % modelled": say what is wrong instead
        raise UserInputError(f"{trace_path.name} holds no operator events to attribute",
                             "export the trace after the profiled steps ran, with record_shapes=True "
                             "(torch.profiler drops a cycle's events when the cycle ends)")
    meta = import_meta(trace, trace_path, args, attr, device_type)
    ops, ceilings, coverage = analyze_ops(attr.ops, meta)
    meta = meta.with_keys(ceilings=ceilings, coverage=coverage)
    return _write_run(out_dir, attr, ops, meta, trace_path, finish), meta


def _write_run(out_dir: Path, attr: Attribution, ops: pd.DataFrame, meta: dict, trace_src: Path,
               finish: Callable[[Path, dict], None] | None = None) -> Path:
    writer = RunWriter(out_dir)
    with writer as tmp:
        write_table(tmp / FILES["ops"], ops)
        write_table(tmp / FILES["sequence"], attr.sequence)
        try:
            _copy_gzipped(trace_src, tmp / FILES["trace"])
        except OSError as e:  # read_trace has just read the source: this is the write (disk full)
            raise write_error(out_dir, e) from None
        if finish is not None:
            finish(tmp, meta)
        write_json_atomic(tmp / "run.json", run_json(meta))
    return writer.final  # a default name another run took meanwhile moved to the next free one


def _copy_gzipped(src: Path, dst: Path) -> None:
    with open(src, "rb") as f:
        gzipped = f.read(2) == b"\x1f\x8b"
    if gzipped:
        shutil.copyfile(src, dst)
        return
    with open(src, "rb") as f, gzip.open(dst, "wb", compresslevel=6) as g:
        shutil.copyfileobj(f, g, length=1 << 20)
