"""The records try-kernel produces, and their JSON form (try_kernel.json, records/try_kernel.py)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

from kernel_advisor.records.try_kernel import SUMMARY_KEYS, TryKernelRecord
from kernel_advisor.collect.loop_timing import Estimate

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
