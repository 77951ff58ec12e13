"""The Python API: profile → recommend (→ measure), from a notebook or a script.

    import kernel_advisor as ka
    run = ka.profile(model, [x], device="cuda", dtype="bfloat16", steps=5, warmup=3)
    run.ops.head()                      # one row per op: time, FLOPs, bytes, roofline verdict
    recs = run.recommend(measure=True)  # ranked; each with its action measured in the model
    ka.report(run, "report.html")       # the HTML report, as `advisor report`
    ka.load(run.path)                   # re-open it later

Every CLI command is a call here. This module checks the options (collect/options.py, once,
before a heavy layer is imported), runs the layers (collect → analyze → recommend → measure,
through pipeline.py) and returns data: runs, records, reports. Text and HTML are render/'s,
on the CLI's side (and `kernel_advisor.report` for notebooks).
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

# Used by the CLI as they are: its interrupt line, its JSON, its device choices, its count options.
from kernel_advisor.collect.interrupts import interrupted_message, kept_runs  # noqa: F401
from kernel_advisor.collect.options import (check_count, check_out_dir, check_profile_options,  # noqa: F401
                                            check_ranks_options, check_seed, check_try_counts, resolve_device)
from kernel_advisor.errors import UserInputError
from kernel_advisor.records.base import json_text  # noqa: F401
from kernel_advisor.records.experiments import FILE as EXPERIMENTS_FILE
from kernel_advisor.records.recommendations import FRAME_COLUMNS, Recommendations, RecommendationsRecord  # noqa: F401
from kernel_advisor.records.run import RunMeta

if TYPE_CHECKING:
    import pandas as pd

    from kernel_advisor.collect.in_memory import Inputs
    from kernel_advisor.collect.loader import LoadedModel
    from kernel_advisor.collect.step_time import StepTime
    from kernel_advisor.distributed.launch import NodeDir
    from kernel_advisor.recommend.measured import AdviceMeasurement
    from kernel_advisor.recommend.report import Report

Progress = Callable[[str, int, int], None]
Warn = Callable[[str], None]  # where a warning line goes: the CLI's stderr; warnings.warn by default
# Called through the API as they are, imported on first use (the modules below load torch).
BELOW = {"device_calibration": "pipeline", "compare_dirs": "pipeline", "kernel_routes": "pipeline",
         "kernel_specs": "pipeline", "rules_by_tier": "pipeline", "rules_in": "pipeline",
         "verified_kernels": "pipeline", "check_output_file": "collect.options",
         "write_plan_module": "experiment.variant"}


def __getattr__(name: str):
    if name in BELOW:
        import importlib

        return getattr(importlib.import_module(f"kernel_advisor.{BELOW[name]}"), name)
    raise AttributeError(f"module 'kernel_advisor.api' has no attribute {name!r}")


@dataclass
class Run:
    """A run directory: `ops` (one row per op), `sequence` (every call in order), `meta` (run.json)."""

    path: Path
    meta: RunMeta  # run.json: a dict, its keys as attributes too
    ops: pd.DataFrame
    sequence: pd.DataFrame
    _loaded: LoadedModel | None = field(default=None, repr=False)  # the in-memory model, when profiled here

    def __repr__(self) -> str:
        """Short: where, what, on what, how long a step takes (`meta` holds all of run.json)."""
        model = Path(str(self.meta.model_file or "?")).name
        where = self.meta.device_name or self.meta.device_type or "?"
        step = self.step_time
        step_text = f"{step.value_s * 1e3:.3g} ms" if step is not None else "not timed"
        return f"Run(path={str(self.path)!r}, model={model!r}, device={where!r}, step={step_text!r})"

    @property
    def recommendations(self) -> pd.DataFrame | None:
        """The last `recommend()`'s findings, one row per finding (`Recommendations.to_frame`); None before any."""
        record = RecommendationsRecord.read(self.path)
        return None if record is None else Recommendations(record.recommendations, record.findings).to_frame()

    @property
    def step_time(self) -> StepTime | None:
        """The run's one step time (median, interval, `basis()`), as every command quotes it."""
        from kernel_advisor.collect.step_time import step_time_of

        return step_time_of(self.meta)

    @property
    def ranks(self) -> dict | None:
        """ranks.json of a distributed run (per-rank table, collectives, skew); None for one process."""
        from kernel_advisor.distributed.assemble import load_ranks_document

        return load_ranks_document(self.path) if self.meta.distributed else None

    @property
    def nodes(self) -> dict | None:
        """nodes.json of a merged multi-node run (per node, inter- against intra-node links); else None."""
        from kernel_advisor.records.node import NODES_FILE, NodesRecord

        return NodesRecord.read(self.path).to_json() if (Path(self.path) / NODES_FILE).is_file() else None

    @property
    def input_warning(self) -> str | None:
        """What `advisor profile` says when the model's first step changed an input in place."""
        from kernel_advisor.collect.runner import mutated_inputs_warning

        return mutated_inputs_warning(self._loaded.mutated_inputs if self._loaded is not None else [])

    def in_region(self, pattern: str) -> Run:
        """The run inside the NVTX / record_function regions matching `pattern` (a name or a glob):
        calls and times of what ran there, shares still of the whole step (`--region`)."""
        from kernel_advisor.analyze.regions import region_view

        view = region_view(self, pattern)
        return replace(view, meta=RunMeta.of(view.meta))

    def recommend(self, rules: Sequence[str | Path] | None = None, measure: bool = False, *, top: int = 10,
                  budget_s: float | None = None, also: Sequence[str] = (),
                  progress: Progress | None = None) -> Recommendations:
        """Ranked recommendations (also written to RUN/recommendations.json).

        With `measure=True` each action is applied to the model, gated and timed (docs/measure.md)
        and the list is ranked by measured gain.
        """
        record = advise(self, rules, top=top, measure=measure, budget_s=budget_s, also=also, progress=progress).save()
        return Recommendations(record.recommendations, record.findings)

    def model(self, warn: Warn | None = None) -> tuple[LoadedModel, str]:
        """The model as profiled (in memory, or re-loaded from the file run.json names), and the mode."""
        if self._loaded is not None:
            return self._loaded, self.meta.mode
        from kernel_advisor.recommend.measured import load_run_model

        loaded, mode, notes = load_run_model(self.meta, self.path)
        for note in notes:  # the file changed since it was profiled
            (warn or _warn)(note)
        return loaded, mode

    def try_kernels(self, kernel_ids: Sequence[str] = (), *, together: bool = False, draws: int = 3,
                    reps: int = 30, warmup: int = 3, compile: bool = True, progress: Progress | None = None):
        """Substitute bundled kernels into the model, gate and time them (as `advisor try-kernel`;
        on a CPU through TRITON_INTERPRET=1, as there)."""
        check_try_counts(draws, reps, warmup)
        from kernel_advisor.pipeline import autocast_of, said_when_nothing_applied, try_in_model

        loaded, mode = self.model()
        options = {"mode": mode, "draws": draws, "reps": reps, "warmup": warmup, "compile": compile}
        args = {"kernel_ids": list(kernel_ids), "all": together, "mode": mode, "autocast": autocast_of(loaded)}
        result = try_in_model(loaded, kernel_ids, together=together, options=options, record_args=args, run=self.path,
                              progress=progress, warn=_warn)
        return said_when_nothing_applied(result.report)


def profile(model: Any, inputs: Inputs, *, device: str = "auto", dtype: str = "keep", mode: str = "inference",
            steps: int = 5, warmup: int = 3, out: str | Path | None = None, loss_fn: Callable | None = None,
            seed: int = 0, autocast: str | None = None, progress: Progress | None = None,
            with_stack: bool = False, threads: int | None = None) -> Run:
    """Profile an in-memory model. `inputs`: a list of tensors, or a function drawing a fresh list.

    `autocast` ("bfloat16" or "float16") runs every step under torch.autocast with the model left
    in float32, as `advisor profile --autocast`: for models that make float32 tensors in forward.
    `with_stack` records Python call stacks in the trace, as `--with-stack` (slows the shapes pass).
    `threads` sets torch's intra-op threads (torch.set_num_threads), as `--threads`.
    """
    check_profile_options(warmup, steps, seed, out, threads)
    from kernel_advisor.collect.in_memory import loaded_from_module
    from kernel_advisor.pipeline import profile_model

    loaded = loaded_from_module(model, inputs, device=device, dtype=dtype, loss_fn=loss_fn, seed=seed,
                                autocast=autocast)
    args = {"mode": mode, "dtype": dtype, "warmup": warmup, "steps": steps, "seed": seed, "entry": None,
            "with_stack": with_stack, "threads": threads}
    return _opened(profile_model(loaded, args, _path(out), type(model).__name__, progress), loaded)


def profile_file(path: str | Path, *, entry: str | None = None, device: str = "auto", dtype: str = "keep",
                 mode: str = "inference", steps: int = 5, warmup: int = 3, out: str | Path | None = None,
                 seed: int = 0, autocast: str | None = None, progress: Progress | None = None,
                 with_stack: bool = False, threads: int | None = None, nproc_per_node: int = 1,
                 fsdp: bool = False, rendezvous: Mapping[str, Any] | None = None) -> Run | NodeDir:
    """Profile a model file (KernelBench convention, or `entry` returning (model, inputs)).

    `nproc_per_node` > 1 (or `fsdp`) launches the ranks through torch.distributed.run (DDP in
    train mode, FSDP2 with `fsdp`), as `--nproc-per-node N`: one run of them all. `rendezvous`
    (distributed/rendezvous.py: nnodes, node_rank, endpoint, rdzv_id, backend; `--nnodes N …` on
    every node) makes this one node of a multi-node job: a NodeDir, which `merge_nodes` joins."""
    from kernel_advisor.distributed.rendezvous import Rendezvous, check_rendezvous

    check_profile_options(warmup, steps, seed, out, threads)
    rdzv = Rendezvous(**(rendezvous or {}))
    check_rendezvous(rdzv)
    args = {"mode": mode, "dtype": dtype, "warmup": warmup, "steps": steps, "seed": seed, "entry": entry}
    if nproc_per_node != 1 or fsdp or rdzv.multi_node:
        check_ranks_options(nproc_per_node, fsdp, mode, autocast, with_stack, threads)
        from kernel_advisor.distributed.launch import DistributedRequest, profile_ranks

        request = DistributedRequest(Path(path), device=device, nproc_per_node=nproc_per_node, fsdp=fsdp,
                                     rendezvous=rdzv, **args)
        done = profile_ranks(request, _path(out), progress)  # the run, or this node's NodeDir
        return load(done) if isinstance(done, Path) else done
    from kernel_advisor.collect.loader import load_model
    from kernel_advisor.collect.nvtx_ranges import mirror_user_nvtx
    from kernel_advisor.pipeline import profile_model

    with mirror_user_nvtx():  # @nvtx.annotate decorators are applied when the file is imported
        loaded = load_model(path, entry=entry, device=device, dtype=dtype, seed=seed, autocast=autocast)
    args.update(with_stack=with_stack, threads=threads)
    return _opened(profile_model(loaded, args, _path(out), loaded.path.stem, progress), loaded)


def import_trace(path: str | Path, *, mode: str = "inference", out: str | Path | None = None,
                 steps: int | None = None, workers: int | None = None, progress: Progress | None = None) -> Run:
    """A torch.profiler / Kineto trace captured elsewhere, attributed and analysed as a run.

    `steps` as `advisor import --steps`: the steps a trace without ProfilerStep markers holds,
    or the last marked steps to keep. A directory of per-rank traces becomes one distributed
    run (ranks.json: stragglers, communication per rank, collective skew), read by `workers`
    processes (default one per CPU, at most 8); rank 0's trace gives the main tables.
    """
    check_out_dir(out)
    trace = Path(path)
    if trace.is_dir():
        if steps is not None:
            raise UserInputError("--steps applies to one trace file", "leave it out when importing a directory")
        if workers is not None:
            check_count("--workers", workers, 1, "leave it out for one per CPU")
        from kernel_advisor.collect.rundir import default_run_dir
        from kernel_advisor.distributed.import_ranks import import_rank_dir

        run_dir = _path(out) or default_run_dir(trace.resolve().name or "ranks")
        return load(import_rank_dir(trace, {"mode": mode, "steps": None}, run_dir, workers, progress)[0])
    if not trace.is_file():
        raise UserInputError(f"trace {trace} does not exist", "pass the .json or .json.gz that torch.profiler wrote")
    if steps is not None:
        check_count("--steps", steps, 1, "pass the steps the trace covers, e.g. --steps 5")
    from kernel_advisor.collect.rundir import default_run_dir
    from kernel_advisor.pipeline import import_to_run

    run_dir = _path(out) or default_run_dir(trace.name.split(".")[0] or "trace")
    return load(import_to_run(trace, {"mode": mode, "source_trace": str(trace), "steps": steps}, run_dir)[0])


def merge_nodes(node_dirs: Sequence[str | Path], *, out: str | Path | None = None) -> Run:
    """One run from the node directories of a multi-node job (`profile_file` with a rendezvous, on each node):
    every rank, per-node figures and inter- against intra-node communication (nodes.json)."""
    check_out_dir(out)
    from kernel_advisor.collect.rundir import default_run_dir
    from kernel_advisor.distributed.nodes import merge_node_dirs

    dirs = [Path(d) for d in node_dirs]
    stem = dirs[0].resolve().name.split("-node")[0] if dirs else "merge"
    return load(merge_node_dirs(dirs, _path(out) or default_run_dir(f"{stem}-merged"))[0])


def load(run_dir: str | Path) -> Run:
    """Re-open a run directory written by `profile`, `profile_file`, `import_trace` or the CLI."""
    from kernel_advisor.collect.rundir import load_run

    run = load_run(run_dir)
    return Run(run.path, run.meta, run.ops, run.sequence)


def run_path(run: str | Path | None = None) -> Path:
    """The run directory a command reads: `run`, or the latest run when None."""
    from kernel_advisor.collect.rundir import resolve_run

    return resolve_run(run)


# ---------------------------------------------------------------- recommend, measured or not


class MeasureInterrupted(KeyboardInterrupt):
    """Ctrl-C during a measured `advise`: what was measured so far is in `experiments`."""

    def __init__(self, experiments: Path):
        super().__init__(str(experiments))
        self.experiments = experiments


@dataclass(frozen=True)
class Advice:
    """`advise`'s answer: the ranked Report and its document (recommendations.json), with the
    measurement, the model file and the mode when measured."""

    run: Run
    report: Report
    doc: dict
    region: str | None = None  # a region's view is never saved over the whole run's advice
    measured: AdviceMeasurement | None = None
    model_name: str | None = None
    mode: str | None = None

    def save(self) -> RecommendationsRecord | None:
        """Write RUN/recommendations.json (not for a region's view); the record written."""
        if self.region:
            return None
        from kernel_advisor.collect.rundir import write_json_atomic
        from kernel_advisor.records.recommendations import FILE

        record = RecommendationsRecord.from_json(self.doc)
        write_json_atomic(Path(self.run.path) / FILE, record.to_json())
        return record


def advise(run: Run | str | Path | None = None, rules: Sequence[str | Path] | None = None, *, top: int = 10,
           region: str | None = None, check_compile: bool = False, measure: bool = False,
           budget_s: float | None = None, also: Sequence[str] = (), emit_plan: str | Path | None = None,
           progress: Progress | None = None, terminal: Callable[[Any], Any] | None = None,
           warn: Warn | None = None) -> Advice:
    """`advisor recommend`: the hotspots of `run` (a Run, its directory, or the latest run) ranked
    by the rules, and with `measure` each action applied, gated and timed in the model within
    `budget_s`, `also` searched too (docs/measure.md). `region` ranks what ran inside it;
    `check_compile` runs torch._dynamo.explain first; `emit_plan` is checked here, written by
    `write_plan_module`. Nothing is saved until `Advice.save()`."""
    check_count("--top", top, 1, "use --top 10, for example")
    from kernel_advisor.pipeline import check_measure_options, compile_check, recommendations_document

    if measure or also or budget_s is not None or emit_plan is not None:
        check_measure_options(measure, also, region, _path(emit_plan))
    run = run if isinstance(run, Run) else load(run_path(run))
    view = run.in_region(region) if region else run
    report, doc = recommendations_document(view, rules, top, compile_check(view.meta) if check_compile else None)
    if not measure:
        return Advice(run, report, doc, region)
    from kernel_advisor.distributed.measure import measure_distributed, run_wrapper
    from kernel_advisor.experiment.search import SearchOptions
    from kernel_advisor.pipeline import measured_document

    loaded, mode = run.model(warn)
    # A distributed run's data-parallel actions are measured on its ranks (distributed/measure.py).
    on_ranks = None if run_wrapper(run.meta) is None else \
        partial(measure_distributed, run.meta, Path(run.path), budget_s=budget_s)
    try:
        doc, m = measured_document(report, doc, loaded, mode, SearchOptions(budget_s=budget_s), top, also, progress,
                                   Path(run.path), run.meta.device_busy_frac, terminal, on_ranks)
    except KeyboardInterrupt as e:
        raise MeasureInterrupted(Path(run.path) / EXPERIMENTS_FILE) from e
    return Advice(run, report, doc, region, m, loaded.path.name, mode)


# ---------------------------------------------------------------- try-kernel


def try_kernel_file(path: str | Path, kernel_ids: Sequence[str] = (), *, together: bool = False,
                    impl: str | None = None, op: str | None = None, device: str = "auto", mode: str = "inference",
                    dtype: str = "keep", autocast: str | None = None, entry: str | None = None, seed: int = 0,
                    draws: int = 3, reps: int = 30, warmup: int = 3, compile: bool = True,
                    compile_mode: str = "default", check_only: bool = False, run: str | Path | None = None,
                    progress: Progress | None = None, warn: Warn | None = None):
    """`advisor try-kernel`: reference kernels (or `impl`, replacing the aten `op`) substituted into
    the model file, gated against eager and float64, timed; the TryResult (report, try_kernel.json's
    payload, where it was saved: `run`, or the latest run of this model)."""
    check_try_counts(draws, reps, warmup)
    check_seed(seed)
    if (impl is None) != (op is None):
        raise UserInputError("--impl and --op go together", "e.g. --impl my.py:softmax --op aten::_softmax")
    from kernel_advisor.collect.loader import load_model
    from kernel_advisor.pipeline import try_in_model, use_triton_interpreter

    dev = resolve_device(device)
    use_triton_interpreter(dev.type, warn or _warn)  # before the model file imports any kernel
    loaded = load_model(path, entry=entry, device=dev.type, dtype=dtype, seed=seed, autocast=autocast)
    options = {"mode": mode, "draws": draws, "reps": reps, "warmup": warmup, "compile": compile,
               "compile_mode": compile_mode, "check_only": check_only, "seed": seed}
    args = {"kernel_ids": list(kernel_ids), "all": together, "impl": impl, "op": op, "device": dev.type,
            "dtype": dtype, "autocast": autocast, "entry": entry}
    return try_in_model(loaded, kernel_ids, together=together, options=options, record_args=args, impl=impl, op=op,
                        run=_path(run), progress=progress, warn=warn or _warn, args_with_options=True)


# ---------------------------------------------------------------- helpers


def _path(value: str | Path | None) -> Path | None:
    return Path(value) if value is not None else None


def _opened(run_dir: Path, loaded: LoadedModel) -> Run:
    run = load(run_dir)
    run._loaded = loaded  # measuring and trying kernels reuse it; `load()` re-loads from the file instead
    return run


def _warn(line: str) -> None:
    warnings.warn(line, stacklevel=3)
