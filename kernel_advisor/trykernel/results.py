"""The records try-kernel produces, and their JSON form (try_kernel.json, records/try_kernel.py)."""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch.profiler import ProfilerActivity, profile

from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.loop_timing import Estimate
from kernel_advisor.collect.profiler_output import quietly
from kernel_advisor.collect.rundir import load_run, resolve_run
from kernel_advisor.collect.runner import make_step
from kernel_advisor.errors import EnvironmentCapabilityError, UserInputError
from kernel_advisor.records.base import RecordError
from kernel_advisor.records.recommendations import RecommendationsRecord
from kernel_advisor.records.run import RunMeta
from kernel_advisor.records.try_kernel import SUMMARY_KEYS, TryKernelRecord
from kernel_advisor.trykernel.candidates import Candidate, CandidateSet, applies, combine, from_spec
from kernel_advisor.trykernel.patterns import PatternMatch
from kernel_advisor.trykernel.substitute_aten import dispatch_cost_s
from reference_kernels.routes import host_bound

SUSPECT_SPEEDUP = 10.0  # above this a speedup is more likely a measurement or correctness problem


@dataclass(frozen=True)
class GateSummary:
    status: str  # "passed" or "FAILED"
    reason: str  # the first problem found, "" when passed
    draws: int  # input draws checked
    leaves: int  # output leaves (and gradients) compared per draw
    max_abs_err: float  # worst |variant - baseline| over leaves and draws
    rel_err: float  # worst ||variant - baseline|| / ||baseline||
    ref_rel_err: float  # worst ||variant - fp64|| / ||fp64|| (NaN without a float64 result)
    baseline_ref_rel_err: float  # eager's own distance from the float64 result, for scale
    worst_leaf: str


@dataclass(frozen=True)
class OpTiming:
    names: tuple[str, ...]  # profiler names summed (ops, or try_kernel:: ranges for patterns)
    variant_s: float  # device time per step in the variant
    baseline_s: float  # the same ops' device time per step in eager
    speedup: float  # baseline_s / variant_s (NaN when either is 0)


@dataclass(frozen=True)
class Prediction:
    predicted_gain_frac: float  # Amdahl: share × (1 − t_new/t_old)
    source: str  # where the share (or the prediction) came from
    measured_gain_frac: float  # 1 − step_variant / step_eager


@dataclass(frozen=True)
class VariantResult:
    name: str
    kind: str  # "eager", "compile", "candidate", "combined", "compile+kernel"
    kernel_ids: tuple[str, ...]
    targets: tuple[str, ...]  # what it replaced: aten overloads and pattern matches
    status: str  # "baseline", "passed", "FAILED", "not applied"
    reason: str
    calls: int  # candidate invocations during the gate (the proof it ran); compile+kernel: the
    # kernels' call sites in the compiled graphs of one forward
    fallback_calls: int
    fallback_reasons: tuple[str, ...]
    gate: GateSummary | None
    timing_label: str  # "CUDA events", "CPU timing", or why there is no timing
    step_s: Estimate | None
    speedup: Estimate | None  # eager / variant, ratio of medians
    verdict: str  # "faster", "slower", "no measurable difference", "" untimed
    op: OpTiming | None
    peak_memory_bytes: int | None
    prediction: Prediction | None
    suspect: str  # why the speedup looks too good, "" otherwise
    compile_s: float | None  # torch.compile only: the first call's wall time
    member_calls: tuple[tuple[str, int], ...] = ()  # per kernel id: its share of `calls`
    # torch.compile variants: Dynamo's graph breaks in one forward (None: not traced) and why
    graph_breaks: int | None = None
    break_reasons: tuple[str, ...] = ()
    # compile+kernel only: torch.compile's step time / this variant's (the kernel's gain once the
    # rest of the model is compiled), and its verdict
    speedup_vs_compile: Estimate | None = None
    verdict_vs_compile: str = ""
    # Calls the registry sent to eager because the kernel is measured to lose on their shape
    # class (KernelSpec.loses) or cannot take it; each reason names the class, the figure and
    # its source, with its count. Also counted in fallback_calls / fallback_reasons.
    eager_routed_calls: int = 0
    eager_routes: tuple[str, ...] = ()


@dataclass(frozen=True)
class TryReport:
    model: str
    device: str
    mode: str
    dtype: str
    timing: str  # "CUDA events", "CPU timing", "none (check only)"
    float64_reference: str  # "" for float64 on every batch item, else the reference used or why none (reference.py)
    variants: tuple[VariantResult, ...]
    notes: tuple[str, ...]

    @property
    def failed_candidates(self) -> tuple[VariantResult, ...]:
        return tuple(v for v in self.variants if v.kind in ("candidate", "combined") and v.status == "FAILED")


def report_record(report: TryReport, extra: Mapping[str, Any] | None = None) -> TryKernelRecord:
    """try_kernel.json's record of `report`; `extra` (created, run, args) goes first."""
    body = dataclasses.asdict(report)
    return TryKernelRecord(**{k: body[k] for k in SUMMARY_KEYS}, variants=tuple(body["variants"]),
                           notes=tuple(body["notes"]), rest=dict(extra or {}))


def report_json(report: TryReport, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """What try_kernel.json holds (and --json prints): the record's document, NaN and inf as null."""
    return report_record(report, extra).to_json()


# ------------------------------------------------------------
# What `recommend` (or the run's op shares) predicted, next to what was measured.
#
# Amdahl: a kernel that makes an op with share s of the step k× faster saves
# s × (1 − 1/k) of the step. The share comes from the run's ops.csv where its rows name the
# replaced ops; module patterns have no row, so their share is the eager per-op time over
# the eager device time measured here. A prediction from the run's recommendations.json
# (see docs/try-kernel.md for the keys read) takes precedence.

@dataclass(frozen=True)
class RunEvidence:
    run_path: str = ""
    op_share_pct: Mapping[str, float] = field(default_factory=dict)  # ops.csv name -> summed share_pct
    recommended_gain_frac: Mapping[str, float] = field(default_factory=dict)  # kernel id -> predicted gain


def evidence_from_run(run_path: Path, ops) -> RunEvidence:
    """Shares from ops.csv (a DataFrame with name, share_pct) and gains from recommendations.json."""
    shares: dict[str, float] = {}
    if ops is not None and {"name", "share_pct"} <= set(ops.columns):
        for name, pct in zip(ops["name"], ops["share_pct"]):
            shares[str(name)] = shares.get(str(name), 0.0) + float(pct)
    return RunEvidence(str(run_path), shares, read_recommended_gains(run_path))


def read_recommended_gains(run_dir: Path) -> dict[str, float]:
    """kernel id -> predicted gain fraction (the largest of the recommendations naming it), from
    the run's recommendations.json; none when the run has no readable one (try-kernel then
    predicts from ops.csv's shares: a stale or damaged file must not stop the attempt)."""
    try:
        record = RecommendationsRecord.read(Path(run_dir))
    except (RecordError, OSError):
        return {}
    gains: dict[str, float] = {}
    for entry in record.recommendations if record is not None else ():
        if entry.kernel_id and isinstance(entry.estimated_gain_frac, (int, float)):
            gains[entry.kernel_id] = max(gains.get(entry.kernel_id, 0.0), float(entry.estimated_gain_frac))
    return gains


def predict(kernel_ids: tuple[str, ...], evidence: RunEvidence, op: OpTiming | None,
            eager_device_s: float, measured_gain_frac: float) -> Prediction | None:
    recommended = [evidence.recommended_gain_frac[k] for k in kernel_ids if k in evidence.recommended_gain_frac]
    if recommended and len(recommended) == len(kernel_ids):
        # NB: gains of different ops add when the ops do not overlap in time
        return Prediction(sum(recommended), "recommendations.json", measured_gain_frac)
    if op is None or not math.isfinite(op.speedup) or op.speedup <= 0:
        return None
    share_pct = sum(evidence.op_share_pct.get(n, 0.0) for n in op.names)
    if share_pct > 0:
        share, source = share_pct / 100.0, f"ops.csv share {share_pct:.1f}% × measured op speedup"
    elif eager_device_s > 0:
        share, source = op.baseline_s / eager_device_s, "share measured here × measured op speedup"
    else:
        return None
    return Prediction(share * (1.0 - 1.0 / op.speedup), source, measured_gain_frac)


# ------------------------------------------------------------
# Which kernels to try on this model, and which run they belong to.
#
# With kernel ids: exactly those (a capability the machine lacks is an error, exit 2).
# Without: every registry kernel that applies to the model — its aten ops appear in the
# model's run (ops.csv names) or, with no run of this model, in one profiled census step;
# or its module patterns are detected in the model. Kernels this machine cannot run are
# skipped with their reason.

@dataclass(frozen=True)
class TryRunContext:
    path: Path | None  # the run try_kernel.json is saved into; None: no run of this model
    evidence: RunEvidence
    op_names: frozenset[str] | None  # names in its ops.csv; None without a run
    notes: tuple[str, ...] = field(default=())
    device_busy_frac: float | None = None  # of its step; None: no run (routes assume host-bound)


def find_run(run: Path | None, loaded: LoadedModel) -> TryRunContext:
    """The explicit --run (must be of this model), else `latest` when it profiled this model."""
    try:
        path = resolve_run(run)
    except UserInputError:
        if run is not None:
            raise
        return TryRunContext(None, RunEvidence(), None, ("no run yet: results are not saved (run `advisor profile` "
                                                      "first, or read them with --json)",))
    r = load_run(path)
    meta = RunMeta.of(r.meta)
    model = meta.model
    same = model.get("sha256") == loaded.sha256 or _same_file(model.get("file"), loaded.path)
    if not same:
        if run is not None:
            raise UserInputError(f"run {path} profiled {model.get('file')}, not {loaded.path.name}",
                                 "pass a run of this model with --run, or leave --run out")
        return TryRunContext(None, RunEvidence(), None, (f"the latest run ({path.name}) is of another model: results "
                                                      "are not saved (profile this model first)",))
    names = frozenset(str(n) for n in r.ops["name"]) if "name" in r.ops.columns else frozenset()
    busy = meta.device_busy_frac
    return TryRunContext(path, evidence_from_run(path, r.ops), names,
                      device_busy_frac=float(busy) if isinstance(busy, (int, float)) else None)


def _same_file(recorded: str | None, path: Path) -> bool:
    try:
        return recorded is not None and Path(recorded).resolve() == path.resolve()
    except OSError:
        return False


def census_op_names(loaded: LoadedModel, mode: str) -> frozenset[str]:
    """Outermost ops of one step (as ops.csv names them), from torch.profiler's CPU events."""
    step = make_step(loaded, mode)
    with quietly(profile(activities=[ProfilerActivity.CPU])) as prof:
        step()
    return frozenset(e.name for e in prof.events() if e.cpu_parent is None)


def select_specs(ids: Sequence[str], op_names: frozenset[str], matches: Sequence[PatternMatch],
                 device_type: str) -> tuple[list, list[str]]:
    """(specs to try, notes about the ones skipped)."""
    from reference_kernels.registry import get_kernel

    if ids:
        specs = [get_kernel(i) for i in dict.fromkeys(ids)]
        for spec in specs:
            reason = spec.reason_if_unsatisfied(device_type)
            if reason:
                raise EnvironmentCapabilityError(f"kernel {spec.id} cannot run here: {reason}",
                                                 "run on a machine that has it, or pick another kernel")
        return specs, []
    patterns = {m.pattern for m in matches}
    candidates = [s for s in _registry() if applies(s, set(op_names), patterns)]
    usable = [s for s in candidates if not s.reason_if_unsatisfied(device_type)]
    notes = [f"skipped {s.id}: {s.reason_if_unsatisfied(device_type)}" for s in candidates if s not in usable]
    if candidates and not usable:
        raise EnvironmentCapabilityError("no kernel that applies to this model can run here: " + "; ".join(notes),
                                         "run on a machine with a GPU (and triton / nvcc)")
    return usable, notes


def _registry() -> tuple:
    from reference_kernels.registry import all_kernels

    try:
        return all_kernels()
    except ImportError as e:
        raise EnvironmentCapabilityError(f"the reference kernel registry cannot be loaded ({e})",
                                         "reinstall kernel_advisor, or try your own kernel with --impl") from e


def build_sets(cands: Sequence[Candidate], together: bool) -> tuple[list[CandidateSet], list[str]]:
    """One set per candidate; with --all, also one with every candidate that can share a run."""
    sets = [CandidateSet(c.id, (c,)) for c in cands]
    if not together or len(cands) < 2:
        return sets, (["--all needs two or more kernels to combine"] if together else [])
    kept, notes = combine(cands)
    if len(kept) >= 2:
        sets.append(CandidateSet("all together", tuple(kept), combined=True))
    return sets, notes


def kernel_routing(device: torch.device, busy_frac: float | None) -> tuple[bool, float]:
    """(host-bound?, dispatch seconds a substituted call pays): which measured routes the kernels
    follow for a step whose device is busy `busy_frac` of it (None: unknown, host-bound assumed),
    and, in a host-bound step on a GPU, the substitution's own host cost, measured once here."""
    bound = host_bound(busy_frac)
    return bound, (_dispatch_s(str(device)) if bound and device.type == "cuda" else 0.0)


@functools.lru_cache(maxsize=None)
def _dispatch_s(device: str) -> float:
    return dispatch_cost_s(torch.device(device))


def load_candidates(specs: Sequence, matches: Sequence[PatternMatch],
                    host_bound: bool = True, dispatch_host_s: float = 0.0) -> list[Candidate]:
    return [from_spec(s, matches, host_bound, dispatch_host_s) for s in specs]


def model_is_module(loaded: LoadedModel) -> bool:
    return isinstance(loaded.model, torch.nn.Module)
