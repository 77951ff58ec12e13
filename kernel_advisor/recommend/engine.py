"""Apply rules to a run: evidence → conditions → gain → ranked recommendations.

Ranking is by estimated time saved per step. Savings are Amdahl-consistent: each
recommendation says which op rows its saving comes from, the total keeps the largest
saving per row (two fixes of one op cannot both remove its time) and adds the rows up.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from kernel_advisor import actions
from kernel_advisor.collect.noise import within_noise
from kernel_advisor.recommend.conditions import Check, Range, evaluate
from kernel_advisor.recommend.evidence import CompileReport, RunContext, run_context
from kernel_advisor.recommend.gain import (EXPOSED_COMM, HOST_GAPS, Bucket, changes_roof, estimate_gain,
                                           evidence_with_gain, gain_frac_of_step, in_step_time, profiled_to_step_factor,
                                           row_bucket, without_at_roof_rows)
from kernel_advisor.recommend.gain_fit import calibrated
from kernel_advisor.recommend.kernels import resolve_kernel, try_kernel_command
from kernel_advisor.recommend.messages import fill_message
from kernel_advisor.recommend.schema import LADDER, Rule
from kernel_advisor.recommend.subjects import Subject, Subjects, build_subjects
from reference_kernels.registry import KernelSpec

# A leave-it verdict on an op stops the rungs that mean new kernels or compilation for it;
# library rungs (a flag, a fused op) stay: they change the roof instead of chasing it.
SUPPRESSED_BY_LEAVE_IT = ("compile", "triton", "cuda")
# NB: the gain models are rough; savings within 15 % of each other are treated as a tie
# (ranking goes to the cheaper rung; a contained subject is not advertised twice).
NEAR_TIE_FRAC = 0.15


@dataclass(frozen=True)
class Recommendation:
    rule_id: str
    title: str
    tier: str
    scope: str
    subject: str  # Subject.key
    label: str  # what it is about, for people: an op name, a pattern's op chain, "whole step"
    message: str
    saving_per_step_s: float | None
    saving_pct: float | None
    row_saving_per_step_s: Mapping[Bucket, float] = field(hash=False)
    gain_model: str = "none"
    gain_basis: str = ""
    evidence: Mapping[str, Any] = field(default_factory=dict, hash=False)
    checks: tuple[Check, ...] = ()
    kernel_id: str | None = None
    command: str | None = None
    references: tuple[str, ...] = ()
    caveats: tuple[str, ...] = ()
    source: str = ""
    action: str = "none"  # what `recommend --measure` applies; kernel:auto resolved to kernel:<id>
    action_reason: str = ""  # why nothing can be applied, when action is "none"
    subject_rows: frozenset[int] = field(default=frozenset(), hash=False)  # Subject.rows


@dataclass(frozen=True)
class Evaluation:
    """One rule on one subject: its checks, the kernel it resolved, and, when every check holds,
    its recommendation (which may claim nothing)."""

    checks: tuple[Check, ...]
    spec: KernelSpec | None
    recommendation: Recommendation | None


@dataclass(frozen=True)
class Engine:
    """Everything the rules were applied to, and every rule evaluated once on every subject of
    its scope (`evaluations`, keyed by rule id and Subject.key): ranking and the hotspots'
    explanations read the same evaluations."""

    ctx: RunContext
    ops: pd.DataFrame
    rules: tuple[Rule, ...]
    subjects: Subjects
    kernels: tuple[KernelSpec, ...]
    evaluations: Mapping[tuple[str, str], Evaluation] = field(default_factory=dict, compare=False)

    def evaluation(self, rule: Rule, subject: Subject) -> Evaluation:
        return self.evaluations[(rule.id, subject.key)]


def _label(subject: Subject) -> str:
    ev = subject.evidence
    return {"op": ev.get("label") or ev.get("name", ""), "pattern": f"{ev.get('pattern')}: {ev.get('names')}",
            "run": "whole step"}[subject.scope]


def evaluate_rule(engine: Engine, rule: Rule, subject: Subject) -> tuple[tuple[Check, ...], KernelSpec | None]:
    """The rule's checks on one subject, plus the implicit 'a kernel covers it' check."""
    checks = evaluate(rule.conditions, subject.evidence)
    if rule.kernel is None:
        return checks, None
    spec = resolve_kernel(rule, subject.scope, subject.evidence, engine.ctx, engine.kernels)
    want = "a bundled kernel" if rule.kernel == "auto" else f"kernel '{rule.kernel}'"
    found = spec.id if spec else None
    return checks + (Check("kernel", f"{want} covering it (dtype, capability)", found, spec is not None),), spec


def recommendation(engine: Engine, rule: Rule, subject: Subject, checks: tuple[Check, ...],
               spec: KernelSpec | None) -> Recommendation:
    ctx = engine.ctx
    action = _action_of(rule, spec)
    gain = calibrated(estimate_gain(rule.gain, subject, ctx, engine.ops, spec.id if spec else None),
                      action["action"], ctx.device_type,
                      subject.row_time_per_step_s)
    if not changes_roof(rule.gain.model, action["action"]):
        gain = without_at_roof_rows(gain, _efficiency_by_row(engine.ops))
    gain = in_step_time(gain, step_factor(ctx))
    evidence = evidence_with_gain(dict(subject.evidence), gain, ctx)
    command = None
    if spec is not None:
        command = try_kernel_command(ctx.model_file, spec.id)
        evidence.update(kernel_id=spec.id, kernel_title=spec.title, try_kernel_command=command)
    return Recommendation(
        rule_id=rule.id, title=rule.title, tier=rule.tier, scope=rule.scope, subject=subject.key,
        label=_label(subject), message=fill_message(rule.message, evidence, rule.scope),
        saving_per_step_s=gain.saving_per_step_s, saving_pct=evidence["gain_pct"],
        row_saving_per_step_s=dict(gain.row_saving_per_step_s), gain_model=rule.gain.model,
        gain_basis=gain.basis, evidence=evidence, checks=checks, kernel_id=spec.id if spec else None,
        command=command, references=rule.references, caveats=rule.caveats,
        source=f"{rule.source}:{rule.line}", subject_rows=subject.rows, **action)


def step_factor(ctx: RunContext) -> float:
    """Profiled op time → the unprofiled step every share divides by (gain.profiled_to_step_factor)."""
    return profiled_to_step_factor(ctx.step_s, max(ctx.device_time_per_step_s, ctx.device_busy_per_step_s))


def _efficiency_by_row(ops: pd.DataFrame) -> dict[Bucket, float]:
    """Each op row's share of its roofline; host-bound rows are left out: what a fix saves there is
    host time, which the device roofline does not bound."""
    if "efficiency_frac" not in ops or "row_id" not in ops:
        return {}
    eff = pd.to_numeric(ops["efficiency_frac"], errors="coerce")
    verdict = ops["verdict"] if "verdict" in ops else pd.Series("", index=ops.index)
    return {row_bucket(r): float(e) for r, e, v in zip(ops["row_id"], eff, verdict)
            if pd.notna(e) and v != "host-bound"}


def _action_of(rule: Rule, spec: KernelSpec | None) -> dict[str, str]:
    if rule.action != "kernel:auto":
        return {"action": rule.action, "action_reason": rule.action_reason}
    if spec is None:
        return {"action": "none", "action_reason": "no bundled kernel covers this subject"}
    return {"action": f"kernel:{spec.id}", "action_reason": ""}


def claims_nothing(rec: Recommendation) -> bool:
    """A rule whose gain model found nothing to save on this subject: not worth a line."""
    return rec.gain_model != "none" and rec.saving_per_step_s is not None and rec.saving_per_step_s <= 0


def _evaluated(engine: Engine, rule: Rule, subject: Subject) -> Evaluation:
    checks, spec = evaluate_rule(engine, rule, subject)
    rec = recommendation(engine, rule, subject, checks, spec) if all(c.ok for c in checks) else None
    return Evaluation(checks, spec, rec)


def _fired(engine: Engine) -> list[Recommendation]:
    return [e.recommendation for e in engine.evaluations.values()
            if e.recommendation is not None and not claims_nothing(e.recommendation)]


def split_suppressed(recs: Sequence[Recommendation]) -> tuple[list[Recommendation], list[Recommendation]]:
    """(kept, suppressed): op recommendations of new-kernel tiers on rows a leave-it rule closed."""
    closed = {r.subject for r in recs if r.tier == "leave-it" and r.scope == "op"}
    kept, dropped = [], []
    for r in recs:
        suppressed = r.scope == "op" and r.subject in closed and r.tier in SUPPRESSED_BY_LEAVE_IT
        (dropped if suppressed else kept).append(r)
    return kept, dropped


@dataclass(frozen=True)
class Finding:
    """One rule's recommendations on every subject it fired on, ranked as one line."""

    rule_id: str
    title: str
    tier: str
    recommendations: tuple[Recommendation, ...]  # largest saving first
    saving_per_step_s: float | None  # union over its rows; None when no subject could be estimated
    saving_pct: float | None
    rank: int = 0
    # The saving is no larger than the step's own noise (collect/noise.py): ranked after every
    # solid finding, since its place among them would rest on noise.
    within_noise: bool = False


def _is_blocker(rule: Rule) -> bool:
    """A compile rule that fires on graph breaks: it must be done before any other compile rung."""
    rng = rule.conditions.get("graph_breaks")
    return rule.tier == "compile" and isinstance(rng, Range) and (rng.min or 0) >= 1


def _finding(recs: list[Recommendation], ctx: RunContext) -> Finding:
    recs = sorted(recs, key=lambda r: (-(r.saving_per_step_s or 0.0), r.subject))
    known = [r for r in recs if r.saving_per_step_s is not None]
    rows: dict[Bucket, float] = {}
    for r in known:
        for row, s in r.row_saving_per_step_s.items():
            rows[row] = max(rows.get(row, 0.0), s)
    saving = sum(rows.values()) if known else None
    frac = gain_frac_of_step(saving, ctx.step_s)
    pct = 100.0 * frac if frac is not None else None
    head = recs[0]
    return Finding(head.rule_id, head.title, head.tier, tuple(recs), saving, pct,
                   within_noise=within_noise(saving, ctx.step_noise_s))


def _tier_index(tier: str) -> int:
    return LADDER.index(tier) if tier in LADDER else len(LADDER)


def _cost(f: Finding) -> tuple[int, int]:
    """The rung, then the effort within it (a flag before a code change)."""
    return _tier_index(f.tier), min((actions.effort(r.action) for r in f.recommendations), default=1)


def near_tie(a: float | None, b: float | None) -> bool:
    """Two savings closer than the estimate's uncertainty (NEAR_TIE_FRAC of the larger)."""
    a, b = a or 0.0, b or 0.0
    return abs(a - b) <= NEAR_TIE_FRAC * max(a, b)


def cheaper_first_on_near_ties(findings: list[Finding]) -> list[Finding]:
    """Adjacent findings whose savings nearly tie: the cheaper one goes first (bubble, stable)."""
    out = list(findings)
    swapped = True
    while swapped:
        swapped = False
        for i in range(len(out) - 1):
            a, b = out[i], out[i + 1]
            if (b.tier != "leave-it" and a.within_noise == b.within_noise
                    and near_tie(a.saving_per_step_s, b.saving_per_step_s)
                    and _cost(b) < _cost(a)):
                out[i], out[i + 1], swapped = b, a, True
    return out


def rank_findings(recs: Iterable[Recommendation], rules: Sequence[Rule], ctx: RunContext) -> list[Finding]:
    """By saving, cheaper rung on near-ties, savings within the step's noise after the solid ones,
    leave-it last; a graph-break blocker goes right before the first compile finding."""
    by_rule: dict[str, list[Recommendation]] = {}
    for r in recs:
        by_rule.setdefault(r.rule_id, []).append(r)
    ordered = sorted((_finding(v, ctx) for v in by_rule.values()),
                     key=lambda f: (f.tier == "leave-it", f.within_noise, -(f.saving_per_step_s or 0.0), _cost(f),
                                    f.rule_id))
    ordered = cheaper_first_on_near_ties(ordered)
    blockers = {r.id for r in rules if _is_blocker(r)}
    first = [f for f in ordered if f.rule_id in blockers]
    rest = [f for f in ordered if f.rule_id not in blockers]
    if first:
        at = next((i for i, f in enumerate(rest) if f.tier == "compile"), None)
        if at is None:
            at = next((i for i, f in enumerate(rest) if f.tier == "leave-it"), len(rest))
        rest[at:at] = first
    return [replace(f, rank=i + 1) for i, f in enumerate(rest)]


def union_saving(recs: Iterable[Recommendation], subjects: Subjects, factor: float = 1.0) -> dict[Bucket, float]:
    """Per row, the largest saving any recommendation claims, capped at the row's own time
    (scaled by `factor` to the unprofiled step, as the savings are: engine.step_factor)."""
    caps = {row_bucket(r): t * factor for r, t in subjects.run.row_time_per_step_s.items()}
    caps[HOST_GAPS] = subjects.run.evidence.get("host_gap_per_step_s") or 0.0
    caps[EXPOSED_COMM] = subjects.run.evidence.get("exposed_comm_s") or 0.0
    best: dict[Bucket, float] = {}
    for rec in recs:
        for row, s in rec.row_saving_per_step_s.items():
            best[row] = min(max(best.get(row, 0.0), s), caps.get(row, s))
    return best


def build_engine(ops: pd.DataFrame, sequence: pd.DataFrame, meta: Mapping[str, Any], rules: Sequence[Rule],
                 kernels: Sequence[KernelSpec] = (), compile_report: CompileReport | None = None) -> Engine:
    ctx = run_context(meta)
    subjects = build_subjects(ops, sequence, ctx, compile_report)
    engine = Engine(ctx, ops, tuple(rules), subjects, tuple(kernels))
    evaluations = {(rule.id, s.key): _evaluated(engine, rule, s) for rule in engine.rules
                   for s in subjects.of_scope(rule.scope)}
    return replace(engine, evaluations=evaluations)


def run_rules(engine: Engine) -> tuple[list[Recommendation], list[Recommendation]]:
    """(recommendations that stand, those a leave-it verdict suppressed or a cheaper one covers)."""
    kept, suppressed = split_suppressed(_fired(engine))
    kept, covered = split_covered(kept)
    return kept, suppressed + covered


def split_covered(recs: Sequence[Recommendation]) -> tuple[list[Recommendation], list[Recommendation]]:
    """(kept, covered): a recommendation whose rows lie inside another's subject, from a rung no
    cheaper, claiming no clearly larger saving, is covered by it (a fusion chain inside an attention
    pattern that SDPA replaces): its time is advertised once."""
    kept, covered = [], []
    for r in recs:
        host = None if r.tier == "leave-it" else next((o for o in recs if _covers(o, r)), None)
        if host is None:
            kept.append(r)
        else:
            covered.append(replace(r, evidence={**r.evidence, "covered_by": f"{host.rule_id} on {host.subject}"}))
    return kept, covered


def _covers(host: Recommendation, r: Recommendation) -> bool:
    rows, host_rows = r.subject_rows, host.subject_rows
    return (host.tier != "leave-it" and bool(rows) and rows < host_rows  # strictly inside
            and _tier_index(host.tier) <= _tier_index(r.tier)
            and (host.saving_per_step_s or 0.0) >= (1 - NEAR_TIE_FRAC) * (r.saving_per_step_s or 0.0))
