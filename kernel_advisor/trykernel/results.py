"""The records try-kernel produces, and their JSON form (try_kernel.json, records/try_kernel.py)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kernel_advisor.collect.loop_timing import Estimate
from kernel_advisor.records.base import RecordError
from kernel_advisor.records.recommendations import RecommendationsRecord
from kernel_advisor.records.try_kernel import SUMMARY_KEYS, TryKernelRecord

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
