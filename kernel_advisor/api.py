"""The Python API: profile → recommend (→ measure) → report, from a notebook or a script.

    import kernel_advisor as ka
    run = ka.profile(model, [x], device="cuda", dtype="bfloat16", steps=5, warmup=3)
    run.ops.head()                      # one row per op: time, FLOPs, bytes, roofline verdict
    recs = run.recommend(measure=True)  # ranked; each with its action measured in the model
    run.report("report.html")
    ka.load(run.path)                   # re-open it later

This module orchestrates the layers (collect → analyze → recommend → measure → render);
the CLI is a thin layer over the same functions.
"""
from __future__ import annotations

import contextlib
import functools
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pandas as pd

from kernel_advisor.collect.in_memory import Inputs, loaded_from_module
from kernel_advisor.collect.loader import LoadedModel, load_model
from kernel_advisor.collect.nvtx_mirror import mirror_user_nvtx
from kernel_advisor.collect.rundir import default_run_dir, load_run, write_json_atomic
from kernel_advisor.collect.step_time import StepTime, step_time_of
from kernel_advisor.distributed.measure import measure_distributed, run_wrapper
from kernel_advisor.errors import UserInputError
from kernel_advisor.experiment.quiet import LOG_FILE, compilers_to_log
from kernel_advisor.experiment.search import SearchOptions
from kernel_advisor.measure.advice import AdviceMeasurement, measure_report
from kernel_advisor.measure.document import measured_json
from kernel_advisor.measure.from_run import load_run_model
from kernel_advisor.pipeline import import_to_run, profile_to_run
from kernel_advisor.recommend.document import recommendations_json
from kernel_advisor.recommend.explain import CompileReport
from kernel_advisor.recommend.kernels import registry_kernels
from kernel_advisor.recommend.report import Report, recommend as recommend_report
from kernel_advisor.recommend.ruleset import load_rules
from kernel_advisor.records.recommendations import FILE, RecommendationEntry, RecommendationsRecord
from kernel_advisor.records.run import RunMeta
from kernel_advisor.render.html_report import write_report
from kernel_advisor.render.profile_render import run_warnings

Progress = Callable[[str, int, int], None]
FRAME_COLUMNS = ("rank", "rule_id", "tier", "title", "where", "subjects", "estimated_gain_per_step_s",
                 "estimated_gain_frac", "within_noise", "actions", "measured_verdict", "measured_gain_frac")


class Recommendations(list):
    """`run.recommend()`'s entries, one per rule and subject, iterated as before (a list).

    Several entries share a rank when one rule fired on several subjects, as `advisor recommend`
    shows them on one line; `to_frame()` is that table: one row per finding, in rank order."""

    def __init__(self, entries: Sequence[RecommendationEntry] = (), findings: Sequence[Mapping] = ()):
        super().__init__(entries)
        self.findings = tuple(findings)  # recommendations.json "findings": gain per rule, union over rows

    def to_frame(self) -> pd.DataFrame:
        by_rule: dict[str, list[RecommendationEntry]] = {}
        for e in self:
            by_rule.setdefault(e.rule_id, []).append(e)
        found = {f.get("rule_id"): f for f in self.findings if isinstance(f, Mapping)}
        rows = [_finding_row(entries, found.get(rule, {})) for rule, entries in by_rule.items()]
        frame = pd.DataFrame(rows, columns=list(FRAME_COLUMNS))
        return frame.sort_values(["rank", "rule_id"], kind="stable").reset_index(drop=True)


def _finding_row(entries: list[RecommendationEntry], finding: Mapping) -> dict:
    """One line of `advisor recommend`'s table: the rule's first subject, "+N more", the union gain."""
    head = entries[0]
    more = f" (+{len(entries) - 1} more)" if len(entries) > 1 else ""
    gain_s = finding.get("estimated_gain_per_step_s", head.estimated_gain_per_step_s)
    gain = finding.get("estimated_gain_frac", head.estimated_gain_frac)
    measured = head.measured
    return {"rank": head.rank, "rule_id": head.rule_id, "tier": head.tier, "title": head.title,
            "where": f"{head.label or head.subject}{more}", "subjects": len(entries),
            "estimated_gain_per_step_s": gain_s, "estimated_gain_frac": gain,
            "within_noise": bool(finding.get("within_noise", False)),
            "actions": ", ".join(dict.fromkeys(e.action for e in entries)),
            "measured_verdict": measured.verdict if measured is not None else None,
            "measured_gain_frac": measured.gain_frac if measured is not None else None}


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
        """The last `recommend()`'s findings, one row per finding (`Recommendations.to_frame`);
        None before any."""
        record = RecommendationsRecord.read(self.path)
        return None if record is None else Recommendations(record.recommendations, record.findings).to_frame()

    @property
    def step_time(self) -> StepTime | None:
        """The run's one step time (median, interval, `basis()`), as every command quotes it."""
        return step_time_of(self.meta)

    @property
    def warnings(self) -> list[str]:
        """What `advisor profile` / `import` warn about this run (drift, markers, shapes, coverage)."""
        return run_warnings(self.meta)

    def recommend(self, rules: Sequence[str | Path] | None = None, measure: bool = False, *, top: int = 10,
                  budget_s: float | None = None, also: Sequence[str] = (),
                  progress: Progress | None = None) -> Recommendations:
        """Ranked recommendations (also written to RUN/recommendations.json).

        With `measure=True` each action is applied to the model, gated and timed (docs/measure.md)
        and the list is ranked by measured gain.
        """
        report, doc = recommendations_document(self, rules, top)
        if measure:
            loaded, mode = self.model()
            doc, _ = measure_document(report, doc, loaded, mode, SearchOptions(budget_s=budget_s), top, also,
                                      progress, self.path, self.meta.device_busy_frac, meta=self.meta)
        record = save_recommendations(self.path, doc)
        return Recommendations(record.recommendations, record.findings)

    def model(self) -> tuple[LoadedModel, str]:
        """The model as profiled (in memory, or re-loaded from the file run.json names), and the mode."""
        if self._loaded is not None:
            return self._loaded, self.meta.mode
        loaded, mode, _ = load_run_model(self.meta, self.path)
        return loaded, mode

    def report(self, path: str | Path) -> Path:
        """A self-contained HTML report of the run (with its recommendations, once made)."""
        return write_report(load_run(self.path), Path(path)).path

    def try_kernels(self, kernel_ids: Sequence[str] = (), *, together: bool = False, draws: int = 3,
                    reps: int = 30, warmup: int = 3, compile: bool = True, progress: Progress | None = None):
        """Substitute bundled kernels into the model, gate and time them (as `advisor try-kernel`)."""
        from kernel_advisor.trykernel.driver import run_try_kernel  # NB: imports the kernels only when asked
        from kernel_advisor.trykernel.candidates import TryOptions

        loaded, mode = self.model()
        options = TryOptions(mode=mode, draws=draws, reps=reps, warmup=warmup, compile=compile)
        args = {"kernel_ids": list(kernel_ids), "all": together, "mode": mode, "autocast": _autocast_name(loaded)}
        report = run_try_kernel(loaded, list(kernel_ids), together, None, None, self.path, options, args,
                                progress).report
        return _said_when_nothing_applied(report)


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
    use_threads(threads)
    loaded = loaded_from_module(model, inputs, device=device, dtype=dtype, loss_fn=loss_fn, seed=seed,
                                autocast=autocast)
    return _profile_loaded(loaded, type(model).__name__, dtype, mode, steps, warmup, out, seed, progress,
                           with_stack=with_stack, threads=threads)


def profile_file(path: str | Path, *, entry: str | None = None, device: str = "auto", dtype: str = "keep",
                 mode: str = "inference", steps: int = 5, warmup: int = 3, out: str | Path | None = None,
                 seed: int = 0, autocast: str | None = None, progress: Progress | None = None,
                 with_stack: bool = False, threads: int | None = None) -> Run:
    """Profile a model file (KernelBench convention, or `entry` returning (model, inputs))."""
    use_threads(threads)
    with mirror_user_nvtx():  # @nvtx.annotate decorators are applied when the file is imported
        loaded = load_model(path, entry=entry, device=device, dtype=dtype, seed=seed, autocast=autocast)
    return _profile_loaded(loaded, loaded.path.stem, dtype, mode, steps, warmup, out, seed, progress, entry,
                           with_stack, threads)


def import_trace(path: str | Path, *, mode: str = "inference", out: str | Path | None = None,
                 steps: int | None = None, workers: int | None = None, progress: Progress | None = None) -> Run:
    """A torch.profiler / Kineto trace captured elsewhere, attributed and analysed as a run.

    `steps` as `advisor import --steps`: the steps a trace without ProfilerStep markers holds,
    or the last marked steps to keep. A directory of per-rank traces becomes one distributed
    run (ranks.json: stragglers, communication per rank, collective skew), read by `workers`
    processes (default one per CPU, at most 8); rank 0's trace gives the main tables.
    """
    trace = Path(path)
    if trace.is_dir():
        from kernel_advisor.distributed.import_ranks import import_rank_dir

        if steps is not None:
            raise UserInputError("--steps applies to one trace file", "leave it out when importing a directory")
        if workers is not None and workers < 1:
            raise UserInputError(f"--workers must be at least 1 (got {workers})", "leave it out for one per CPU")
        run_dir = Path(out) if out is not None else default_run_dir(trace.resolve().name or "ranks")
        run_dir, _ = import_rank_dir(trace, {"mode": mode, "steps": None}, run_dir, workers, progress)
        return load(run_dir)
    if not trace.is_file():
        raise UserInputError(f"trace {trace} does not exist", "pass the .json or .json.gz that torch.profiler wrote")
    if steps is not None and steps < 1:
        raise UserInputError(f"--steps must be at least 1 (got {steps})", "pass the steps the trace covers, e.g. --steps 5")
    run_dir = Path(out) if out is not None else default_run_dir(trace.name.split(".")[0] or "trace")
    run_dir, _ = import_to_run(trace, {"mode": mode, "source_trace": str(trace), "steps": steps}, run_dir)
    return load(run_dir)


def merge_nodes(node_dirs: Sequence[str | Path], *, out: str | Path | None = None) -> Run:
    """One run from the node directories of a multi-node job (`advisor profile --nnodes N` on each
    node): every rank, per-node figures and inter- against intra-node communication (nodes.json)."""
    from kernel_advisor.distributed.nodes import merge_node_dirs

    dirs = [Path(d) for d in node_dirs]
    stem = dirs[0].resolve().name.split("-node")[0] if dirs else "merge"
    run_dir, _ = merge_node_dirs(dirs, Path(out) if out is not None else default_run_dir(f"{stem}-merged"))
    return load(run_dir)


def load(run_dir: str | Path) -> Run:
    """Re-open a run directory written by `profile`, `profile_file`, `import_trace` or the CLI."""
    run = load_run(run_dir)
    return Run(run.path, run.meta, run.ops, run.sequence)


def _profile_loaded(loaded: LoadedModel, stem: str, dtype: str, mode: str, steps: int, warmup: int,
                    out, seed: int, progress: Progress | None, entry: str | None = None,
                    with_stack: bool = False, threads: int | None = None) -> Run:
    from kernel_advisor.collect.profiler import validate_counts

    validate_counts(warmup, steps)
    run_dir = Path(out) if out is not None else default_run_dir(stem)
    args = {"device": loaded.device.type, "mode": mode, "dtype": dtype, "autocast": _autocast_name(loaded),
            "warmup": warmup, "steps": steps, "seed": seed, "entry": entry, "with_stack": with_stack,
            "threads": threads}
    run_dir, _ = profile_to_run(loaded, args, run_dir, progress)
    run = load(run_dir)
    run._loaded = loaded  # measuring and trying kernels reuse it; `load()` re-loads from the file instead
    return run


CANDIDATE_KINDS = ("candidate", "combined", "compile+kernel")


def _said_when_nothing_applied(report):
    """A try that substituted no kernel says so, in the report's notes and as a warning: an empty
    comparison would otherwise read as "the kernels made no difference"."""
    if any(v.kind in CANDIDATE_KINDS and v.status != "not applied" for v in report.variants):
        return report
    reasons = "; ".join(v.reason for v in report.variants if v.kind in CANDIDATE_KINDS and v.reason)
    line = ("try_kernels applied no kernel: none of the asked kernels matched an op of this model"
            + (f" ({reasons})" if reasons else "") + "; `advisor kernels` lists them with the ops they replace")
    warnings.warn(line, stacklevel=3)
    return replace(report, notes=(*report.notes, line))


def use_threads(threads: int | None) -> None:
    """torch's intra-op threads for the profile (`--threads N`); None leaves torch's default.
    Fewer threads than cores keeps a step off cores that another job needs (collect/noise.py)."""
    if threads is None:
        return
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise UserInputError(f"--threads must be a whole number of at least 1 (got {threads!r})",
                             "use --threads 1, or as many as the machine has idle cores")
    import torch

    torch.set_num_threads(threads)


def _autocast_name(loaded: LoadedModel) -> str | None:
    """As the CLI records it in run.json args.autocast: "bfloat16", "float16" or None."""
    return str(loaded.autocast).removeprefix("torch.") if loaded.autocast is not None else None


# ---------------------------------------------------------------- shared with the CLI


def recommendations_document(run, rules: Sequence[str | Path] | None, top: int,
                             compile_report: CompileReport | None = None) -> tuple[Report, dict]:
    """The ranked Report and its JSON document (schema: records/recommendations.py)."""
    kernels = registry_kernels()
    rule_set = load_rules([Path(r) for r in rules or ()], kernel_ids={k.id for k in kernels})
    report = recommend_report(run.ops, run.sequence, run.meta, rule_set, kernels, compile_report, top)
    return report, RecommendationsRecord.from_json(recommendations_json(report, str(run.path))).to_json()


def measure_document(report: Report, doc: Mapping, loaded: LoadedModel, mode: str, options: SearchOptions,
                     top: int, also: Sequence[str] = (), progress: Progress | None = None,
                     run_dir: Path | None = None, busy_frac: float | None = None,
                     terminal: Callable[[Any], Any] | None = None,
                     meta: Mapping | None = None) -> tuple[dict, AdviceMeasurement]:
    """Every recommendation's action measured in the model, searched with the compile modes and
    their combinations; the document ranked by measured gain. experiments.json and the
    compilers' log (measure.log) are written in `run_dir` as the search goes; `terminal`, when
    given, receives the stream to the real stderr while the compilers' output is diverted. A
    distributed run (`meta`, its run.json) has its data-parallel actions measured on its ranks
    (distributed/measure.py), into distributed_experiments.json."""
    log_dir = Path(run_dir) if run_dir is not None else None
    on_ranks = None
    if meta is not None and log_dir is not None and run_wrapper(meta) is not None:
        on_ranks = functools.partial(measure_distributed, meta, log_dir, budget_s=options.budget_s)
    quiet = compilers_to_log(log_dir / LOG_FILE) if log_dir is not None else contextlib.nullcontext(None)
    with quiet as stream:
        with (terminal(stream) if terminal is not None and stream is not None else contextlib.nullcontext()):
            m = measure_report(report, loaded, mode, options, top, also, progress, busy_frac, log_dir, on_ranks)
    return RecommendationsRecord.from_json(measured_json(dict(doc), report, m)).to_json(), m


def save_recommendations(run_dir: Path, doc: Mapping) -> RecommendationsRecord:
    record = RecommendationsRecord.from_json(doc)
    write_json_atomic(Path(run_dir) / FILE, record.to_json())
    return record
