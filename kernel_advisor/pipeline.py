"""The sequences api.py runs, below it: a loaded model or a foreign trace to a complete run
directory (collect → analyze), then what the commands do with a run (recommend, measure,
try-kernel) and with the machine (calibrate, the reference kernels, the rules).

It sits above the layers it joins: collect reads and attributes the trace, analyze costs every
op and places it on the roofline; distributed ranks run the same `analyze_capture`.
"""
from __future__ import annotations

import contextlib
import gzip
import os
import shutil
import sys
import tempfile
import warnings
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import pandas as pd

from kernel_advisor.analyze.costs import cost_arguments, modelled_op_names
from kernel_advisor.analyze.roofline import analyze_ops
from kernel_advisor.collect.attribute import Attribution, attribute
from kernel_advisor.collect.interrupts import hold_for_tests
from kernel_advisor.collect.kernel_timing import with_kernel_timings
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.options import check_output_file, resolve_device
from kernel_advisor.collect.profiler import Capture, Progress, capture
from kernel_advisor.collect.run_meta import FILES, import_meta, profile_meta, run_json
from kernel_advisor.collect.rundir import (RunWriter, check_writable_target, default_run_dir, load_run, resolve_run,
                                           write_error, write_json_atomic, write_table)
from kernel_advisor.collect.runner import no_operator_error
from kernel_advisor.collect.trace import TraceData, read_trace
from kernel_advisor.errors import EnvironmentCapabilityError, UserInputError
from kernel_advisor.recommend.kernels import registry_kernels
from kernel_advisor.recommend.schema import TIERS, load_rules, rule_files
from kernel_advisor.records.recommendations import RecommendationsRecord
from kernel_advisor.records.run import RunMeta

if TYPE_CHECKING:
    from kernel_advisor.recommend.evidence import CompileReport
    from kernel_advisor.recommend.report import Report


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


# ---------------------------------------------------------------- after the run exists: what api.py runs
# The heavier layers (measuring, try-kernel, calibration, the reference kernels) are imported
# inside the functions that use them: the distributed ranks import this module for
# analyze_capture alone.


def recommendations_document(run, rules: Sequence[str | Path] | None, top: int,
                             compile_report: CompileReport | None = None) -> tuple[Report, dict]:
    """The ranked Report and its JSON document (schema: records/recommendations.py)."""
    from kernel_advisor.recommend.report import recommend, recommendations_json

    kernels = registry_kernels()
    rule_set = load_rules([Path(r) for r in rules or ()], kernel_ids={k.id for k in kernels})
    report = recommend(run.ops, run.sequence, run.meta, rule_set, kernels, compile_report, top)
    return report, RecommendationsRecord.from_json(recommendations_json(report, str(run.path))).to_json()


def compile_check(meta: RunMeta) -> CompileReport:
    """torch._dynamo.explain on the run's model file (`recommend --check-compile`), on the device
    it was profiled on when that is here, else on the CPU."""
    from kernel_advisor.recommend.evidence import check_compile

    file = meta.model_file
    if not file or not Path(file).is_file():
        raise UserInputError(f"--check-compile needs the model file, and run.json names {file!r}, which is not here",
                             "run from the directory you profiled in, or drop --check-compile")
    device = resolve_device("auto" if meta.device_type == "cuda" else "cpu").type
    return check_compile(file, entry=meta.model_entry, device=device)


def check_measure_options(measure: bool, also: Sequence[str], region: str | None, emit_plan: Path | None) -> None:
    """`recommend --measure`'s options, before anything is loaded."""
    from kernel_advisor import actions

    if not measure:
        raise UserInputError("--budget-s, --also and --emit-plan only apply with --measure", "add --measure")
    if emit_plan is not None:
        from kernel_advisor.experiment.variant import check_plan_path

        check_output_file(emit_plan, (".py",), force=True, option="--emit-plan")
        check_plan_path(emit_plan)  # and an existing .py only when we wrote it
    if region:
        raise UserInputError("--measure applies actions to the whole model, not to a --region",
                             "drop --region to measure, or drop --measure to view the region")
    for name in also:
        if not actions.is_known(name) or name in (actions.NONE, "kernel:auto"):
            raise UserInputError(f"--also {name}: not an action",
                                 f"use one of {', '.join(actions.action_names())} or kernel:<id>")


def measured_document(report: Report, doc: Mapping, loaded: LoadedModel, mode: str, options, top: int,
                      also: Sequence[str] = (), progress: Progress | None = None, log_dir: Path | None = None,
                      busy_frac: float | None = None, terminal: Callable[[Any], Any] | None = None,
                      on_ranks: Callable | None = None) -> tuple[dict, Any]:
    """The document with every action measured (recommend/measured.py), the compilers' output in
    `log_dir`/measure.log; `terminal(stream)` gets the real stderr meanwhile."""
    from kernel_advisor.experiment.engine import LOG_FILE, compilers_to_log
    from kernel_advisor.recommend.measured import measure_report, measured_json

    quiet = compilers_to_log(log_dir / LOG_FILE) if log_dir is not None else contextlib.nullcontext(None)
    with quiet as stream:
        with (terminal(stream) if terminal is not None and stream is not None else contextlib.nullcontext()):
            m = measure_report(report, loaded, mode, options, top, also, progress, busy_frac, log_dir, on_ranks)
    return RecommendationsRecord.from_json(measured_json(dict(doc), report, m)).to_json(), m


def try_in_model(loaded: LoadedModel, kernel_ids: Sequence[str], *, together: bool, options: Mapping[str, Any],
                 record_args: Mapping[str, Any], warn: Callable[[str], None], impl: str | None = None,
                 op: str | None = None, run: Path | None = None, progress: Progress | None = None,
                 args_with_options: bool = False):
    """try-kernel on a loaded model (trykernel/driver.py): the TryResult. try_kernel.json's "args"
    are `record_args`, and every TryOptions field with `args_with_options` (as `advisor try-kernel` writes)."""
    use_triton_interpreter(loaded.device.type, warn)
    # After TRITON_INTERPRET is set: Triton reads it when a kernel is decorated.
    from kernel_advisor.trykernel.candidates import TryOptions, TryRequest
    from kernel_advisor.trykernel.driver import run_try_kernel

    opts = TryOptions(**options)
    record = {**record_args, **asdict(opts)} if args_with_options else dict(record_args)
    request = TryRequest(tuple(kernel_ids), together, impl, op, run, opts, record)
    return run_try_kernel(loaded, request, progress)


def use_triton_interpreter(device_type: str, warn: Callable[[str], None]) -> None:
    """On a CPU, Triton kernels run in its interpreter: set before any kernel is decorated."""
    if device_type != "cpu":
        return
    os.environ["TRITON_INTERPRET"] = "1"
    common = sys.modules.get("reference_kernels.triton._common")
    if common is not None and not common.INTERPRETED:
        warn("Triton kernels were imported before TRITON_INTERPRET=1 was set; on CPU they will "
             "fail — export TRITON_INTERPRET=1 before running advisor")


CANDIDATE_KINDS = ("candidate", "combined", "compile+kernel")


def said_when_nothing_applied(report):
    """A try that substituted no kernel says so, in the report's notes and as a warning: an empty
    comparison would otherwise read as "the kernels made no difference"."""
    if any(v.kind in CANDIDATE_KINDS and v.status != "not applied" for v in report.variants):
        return report
    reasons = "; ".join(v.reason for v in report.variants if v.kind in CANDIDATE_KINDS and v.reason)
    line = ("try_kernels applied no kernel: none of the asked kernels matched an op of this model"
            + (f" ({reasons})" if reasons else "") + "; `advisor kernels` lists them with the ops they replace")
    warnings.warn(line, stacklevel=3)
    return replace(report, notes=(*report.notes, line))


@dataclass(frozen=True)
class Calibrated:
    """`advisor calibrate`'s answer: the calibration, measured now or read from the cache, and
    the ceilings every later profile on this device uses."""

    device_type: str
    identity: Any  # analyze/calibrate.py DeviceIdentity: name, driver
    path: Path  # the cache file
    calibration: Any  # analyze/calibrate.py Calibration
    from_cache: bool
    ceilings: Any  # analyze/ceilings.py Ceilings
    datasheet: Any  # the datasheet's Ceilings, None for a device without one
    spec: Any  # the datasheet entry (DeviceSpec), None likewise


def device_calibration(device: str = "auto", force: bool = False,
               on_step: Callable[[int, int, str], None] | None = None) -> Calibrated:
    """The cached calibration of this device (+ driver), measured first when there is none or `force`."""
    from kernel_advisor.analyze.ceilings import cache_file, datasheet_ceilings, resolve_ceilings, spec_for
    from kernel_advisor.analyze.calibrate import calibrate, local_device_identity, read_calibration, write_cache

    device_type = resolve_device(device).type
    identity = local_device_identity(device_type)
    path = cache_file(identity.name, identity.driver)
    cal = None if force else read_calibration(identity.name, identity.driver)
    from_cache = cal is not None
    if cal is None:
        cal = calibrate(device_type, on_step=on_step)
        try:
            path = write_cache(cal)
        except OSError as e:  # write_cache removed its temporary file; the old cache is intact
            raise write_error(path, e) from None
    return Calibrated(device_type, identity, path, cal, from_cache,
                      resolve_ceilings(identity.name, identity.driver, device_type=device_type),
                      datasheet_ceilings(identity.name, device_type), spec_for(identity.name, device_type))


def kernel_specs() -> tuple:
    """Every reference kernel (reference_kernels/registry.py KernelSpec), as `advisor kernels` lists them."""
    from reference_kernels import registry

    return registry.all_kernels()


def kernel_routes() -> dict:
    """The measured shapes where each kernel loses to eager (reference_kernels/routes.py), by id."""
    from reference_kernels import routes

    return routes.routes()


def verified_kernels(ids: Sequence[str], device: str, progress: Progress | None = None,
                     warn: Callable[[str], None] = warnings.warn) -> list:
    """`advisor kernels verify`: the named kernels (each must run on `device`), or every one that
    can, checked against float64 PyTorch: outputs, gradients, gradcheck, determinism."""
    from reference_kernels.verify import verify_kernel  # imports no triton by itself

    specs = _runnable_kernels(ids, device, warn)
    report = progress or (lambda phase, done, total: None)
    results = []
    for done, spec in enumerate(specs):
        report(f"verifying on {device}", done, len(specs))
        results.append(verify_kernel(spec, device))
    report(f"verifying on {device}", len(specs), len(specs))
    return results


def _runnable_kernels(ids: Sequence[str], device: str, warn: Callable[[str], None]) -> list:
    from reference_kernels import registry

    if ids:
        specs = [registry.get_kernel(i) for i in ids]  # KernelInputError (exit 1) for an unknown id
        for spec in specs:
            reason = spec.reason_if_unsatisfied(device)
            if reason:
                raise EnvironmentCapabilityError(f"{spec.id} cannot run on {device}: {reason}",
                                                 "pick another --device or another kernel")
        return specs
    every = registry.all_kernels()
    skipped = [s.id for s in every if s.reason_if_unsatisfied(device) is not None]
    if skipped:
        warn(f"skipping {len(skipped)} kernel(s) that cannot run on {device}: {', '.join(skipped)} "
             f"(see `advisor kernels --device {device}`)")
    specs = [s for s in every if s.reason_if_unsatisfied(device) is None]
    if not specs:
        raise EnvironmentCapabilityError(f"no reference kernel can run on {device}",
                                         "install triton, or run on a CUDA machine")
    return specs


def rules_by_tier(extra: Sequence[str | Path] = ()) -> list:
    """Every rule `recommend` applies (the built-in ones and `extra` files), cheapest tier first."""
    order = {tier: i for i, tier in enumerate(TIERS)}
    rules = load_rules([Path(r) for r in extra], kernel_ids={k.id for k in registry_kernels()})
    return sorted(rules, key=lambda r: order[r.tier])  # stable: file order within a tier


def rules_in(path: str | Path) -> int:
    """How many rules `path` (a file or directory) holds, loaded as `--rules` loads them."""
    files = {str(f) for f in rule_files(Path(path))}
    return sum(1 for r in load_rules([Path(path)], kernel_ids={k.id for k in registry_kernels()}) if r.source in files)


def profile_model(loaded: LoadedModel, args: dict, out: Path | None, stem: str,
                  progress: Progress | None = None) -> Path:
    """A loaded model profiled into `out` (default: a new run named after `stem`); `args` as
    run.json records them, with the device and autocast the model was loaded with."""
    threads = args.get("threads")
    if threads is not None:  # fewer than the cores keeps a step off cores another job needs (collect/noise.py)
        import torch

        torch.set_num_threads(threads)
    args = {"device": loaded.device.type, "autocast": autocast_of(loaded), **args}
    return profile_to_run(loaded, args, out if out is not None else default_run_dir(stem), progress)[0]


def autocast_of(loaded: LoadedModel) -> str | None:
    """As run.json records it in args.autocast: "bfloat16", "float16" or None."""
    return str(loaded.autocast).removeprefix("torch.") if loaded.autocast is not None else None


def compare_dirs(run_a: str | Path, run_b: str | Path):
    """`advisor compare`: B against A per step, with A's recommendations set against what changed."""
    from kernel_advisor.analyze.compare import compare_runs
    from kernel_advisor.records.recommendations import load_recommendations

    dir_a, dir_b = resolve_run(run_a), resolve_run(run_b)
    return compare_runs(load_run(dir_a), load_run(dir_b), load_recommendations(dir_a))
