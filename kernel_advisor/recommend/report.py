"""`recommend()`: a run's tables and settings in, a ranked Report out. No printing here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import pandas as pd

from kernel_advisor.actions import fixed_by
from kernel_advisor.recommend.engine import (Finding, Recommendation, build_engine, rank_findings, run_rules,
                                             step_factor, union_saving)
from kernel_advisor.recommend.evidence import CompileReport, RunContext
from kernel_advisor.recommend.gain import Bucket, bucket_keys, gain_frac_of_step
from kernel_advisor.recommend.hotspots import Hotspot, hotspots
from kernel_advisor.recommend.schema import Rule
from kernel_advisor.records.base import strict
from kernel_advisor.records.recommendations import SCHEMA_VERSION
from reference_kernels.registry import KernelSpec


@dataclass(frozen=True)
class Report:
    ctx: RunContext
    findings: tuple[Finding, ...]  # ranked
    suppressed: tuple[Recommendation, ...]
    hotspots: tuple[Hotspot, ...]
    row_saving_per_step_s: Mapping[Bucket, float]  # the Amdahl union: per row, the largest claim
    total_saving_per_step_s: float
    total_saving_pct: float | None
    rule_sources: tuple[str, ...]
    compile_report: CompileReport | None
    run_meta: Mapping[str, Any]


def recommend(ops: pd.DataFrame, sequence: pd.DataFrame, meta: Mapping[str, Any], rules: Sequence[Rule],
              kernels: Sequence[KernelSpec] = (), compile_report: CompileReport | None = None,
              top_hotspots: int = 10) -> Report:
    engine = build_engine(ops, sequence, meta, rules, kernels, compile_report)
    recs, suppressed = run_rules(engine)
    union = union_saving(recs, engine.subjects, step_factor(engine.ctx))
    step_s = engine.ctx.step_s
    # NB: the union's rows are disjoint and each capped at its time in the step; a row table whose
    # times overlap (streams) could still sum past the step, so the total is held to it.
    total = min(sum(union.values()), step_s) if step_s > 0 else sum(union.values())
    return Report(
        ctx=engine.ctx, findings=tuple(rank_findings(recs, rules, engine.ctx)), suppressed=tuple(suppressed),
        hotspots=hotspots(engine, recs, suppressed, top_hotspots), row_saving_per_step_s=union,
        total_saving_per_step_s=total, total_saving_pct=100.0 * gain_frac_of_step(total, step_s) if step_s > 0 else None,
        rule_sources=tuple(dict.fromkeys(r.source for r in rules)), compile_report=compile_report,
        run_meta=dict(meta))


def action_row_saving_per_step_s(report: Report, action: str) -> dict[Bucket, float]:
    """Per row, the largest saving claimed by a recommendation that `action` carries out.

    Recommendations a cheaper rung covers count too: applying compile fuses a chain inside an
    attention pattern whether or not the list shows that chain.
    """
    names = fixed_by(action)
    standing = (r for f in report.findings for r in f.recommendations)
    covered = (r for r in report.suppressed if "covered_by" in r.evidence)
    best: dict[Bucket, float] = {}
    for rec in (*standing, *covered):
        if rec.action in names:
            for row, s in rec.row_saving_per_step_s.items():
                best[row] = max(best.get(row, 0.0), s)
    return best


def action_gain_frac(report: Report, action: str) -> float | None:
    """The predicted saving of applying `action` to the whole model, as a fraction of the step (< 1)."""
    step_s = report.ctx.step_s
    rows = action_row_saving_per_step_s(report, action)
    if not rows or step_s <= 0:
        return None
    # NB: rows hold savings capped at each op's time, so the sum stays below the step; the clamp
    # guards against step times measured apart from the ops' times.
    return min(sum(rows.values()) / step_s, MAX_GAIN_FRAC)


MAX_GAIN_FRAC = 0.99


def host_gap_frac(report: Report) -> float:
    """The step's idle share the CUDA-graphs rule claims (the union's host-gaps row), as the fit saw it."""
    from kernel_advisor.recommend.gain import HOST_GAPS
    return gain_frac_of_step(report.row_saving_per_step_s.get(HOST_GAPS, 0.0), report.ctx.step_s) or 0.0


def all_hotspots_at_roof(report: Report) -> bool:
    """Every hotspot with a figure already at >= AT_ROOF_FRAC of its roofline: no kernel work is left."""
    from kernel_advisor.recommend.gain import AT_ROOF_FRAC
    figures = [h.efficiency_frac for h in report.hotspots if h.efficiency_frac is not None and h.verdict != "host-bound"]
    return bool(figures) and len(figures) == len(report.hotspots) and min(figures) >= AT_ROOF_FRAC


def action_gain_interval(report: Report, action: str, table=None):
    """`action` on the whole model: the fitted gain model's {value, low, high} (recommend/gain_fit.py).

    None when the rules claim nothing for it; 0 when every hotspot is at its roof and the action
    does not move the roof."""
    from kernel_advisor.recommend.gain import changes_roof
    from kernel_advisor.recommend.gain_fit import (
        GainInterval, family_fit, memory_bound_frac, predicted_gain_interval)
    predicted = action_gain_frac(report, action)
    if predicted is None:
        return None
    if all_hotspots_at_roof(report) and not changes_roof("", action):
        return GainInterval(0.0, 0.0, 0.0)
    gap = host_gap_frac(report)
    features = {"predicted_frac": predicted, "host_gap_frac": gap,
                "memory_bound_frac": memory_bound_frac(((h.share_pct, h.verdict, h.chosen_tier)
                                                        for h in report.hotspots), gap)}
    fit = family_fit(action, report.ctx.device_type, table)
    return predicted_gain_interval(features, fit) if fit is not None else GainInterval(predicted, predicted, predicted)


def action_predictions(report: Report) -> list[dict]:
    """Each action the recommendations name, with its fitted interval, largest value first."""
    names = dict.fromkeys(r.action for f in report.findings for r in f.recommendations if r.action != "none")
    out = []
    for action in names:
        iv = action_gain_interval(report, action)
        if iv is not None:
            out.append({"action": action, "predicted_gain": iv.to_dict()})
    return sorted(out, key=lambda a: -a["predicted_gain"]["value"])


# ------------------------------------------------------------
# recommendations.json's document for a recommend Report (schema: records/recommendations.py).
#
# Fractions here, as the record holds them (`estimated_gain_frac`); render/ scales them for people.

_DROP_FROM_EVIDENCE = ("settings",)


def _frac(pct: float | None) -> float | None:
    return None if pct is None else pct / 100.0


def _row_ids(rec: Recommendation) -> list[int]:
    ids = rec.evidence.get("row_ids")
    if isinstance(ids, list):
        return sorted(set(ids))
    row_id = rec.evidence.get("row_id")
    return [row_id] if rec.scope == "op" and isinstance(row_id, int) else []


def _rec_dict(rec: Recommendation, rank: int) -> dict[str, Any]:
    """One entry of "recommendations"; key names follow what records/recommendations.py and
    trykernel/results.py read (rule_id, tier, estimated_gain_*, kernel_id, row_ids)."""
    evidence = {k: v for k, v in rec.evidence.items() if k not in _DROP_FROM_EVIDENCE}
    return {
        "rank": rank, "rule_id": rec.rule_id, "tier": rec.tier, "title": rec.title, "scope": rec.scope,
        "subject": rec.subject, "label": rec.label, "row_ids": _row_ids(rec), "message": rec.message,
        "estimated_gain_per_step_s": rec.saving_per_step_s, "estimated_gain_frac": _frac(rec.saving_pct),
        "row_gain_per_step_s": bucket_keys(rec.row_saving_per_step_s),
        "gain_model": rec.gain_model, "gain_basis": rec.gain_basis,
        "thresholds": [{"key": c.key, "expected": c.expected, "actual": c.actual, "ok": c.ok} for c in rec.checks],
        "evidence": evidence, "kernel_id": rec.kernel_id, "command": rec.command,
        "references": list(rec.references), "caveats": list(rec.caveats), "source": rec.source,
        "action": rec.action, "action_reason": rec.action_reason, "measured": None,
    }


def _finding_dict(f: Finding) -> dict[str, Any]:
    return {"rank": f.rank, "rule_id": f.rule_id, "title": f.title, "tier": f.tier,
            "estimated_gain_per_step_s": f.saving_per_step_s, "estimated_gain_frac": _frac(f.saving_pct),
            "subjects": [r.subject for r in f.recommendations],
            "actions": list(dict.fromkeys(r.action for r in f.recommendations)), "within_noise": f.within_noise,
            "measured": None}


def _hotspot_dict(h: Hotspot) -> dict[str, Any]:
    return {"row_id": h.row_id, "name": h.name, "input_shapes": h.input_shapes, "share_pct": h.share_pct,
            "time_per_step_s": h.time_per_step_s,
            "verdict": h.verdict, "efficiency_frac": h.efficiency_frac,
            "chosen": {"tier": h.chosen_tier, "rule_id": h.chosen_rule, "why": h.why},
            "passed_over": [{"tier": t, "reason": r} for t, r in h.passed_over]}


def _compile_dict(report: Report) -> dict[str, Any] | None:
    c = report.compile_report
    if c is None:
        return None
    return {"graph_count": c.graph_count, "graph_break_count": c.graph_break_count, "op_count": c.op_count,
            "breaks": [{"reason": b.reason, "frames": list(b.frames)} for b in c.breaks]}


def recommendations_json(report: Report, run_dir: str | None = None) -> dict[str, Any]:
    """recommendations.json's document for `report` (records/recommendations.py checks and reads it)."""
    ctx = report.ctx
    doc = {
        "schema_version": SCHEMA_VERSION,
        "run": {"dir": run_dir, "model": ctx.model_file, "device": ctx.device_name,
                "device_type": ctx.device_type, "capability": ctx.capability, "steps": ctx.steps,
                "settings": dict(ctx.settings)},
        "step_s": ctx.step_s, "step_basis": ctx.step_basis, "step_noise_s": ctx.step_noise_s,
        "total_estimated_gain_per_step_s": report.total_saving_per_step_s,
        "total_estimated_gain_frac": _frac(report.total_saving_pct),
        "row_gain_per_step_s": bucket_keys(report.row_saving_per_step_s),
        # Optional for readers: the fitted whole-model gain per action, {value, low, high} (gain_fit.py).
        "action_predictions": action_predictions(report),
        "findings": [_finding_dict(f) for f in report.findings],
        "recommendations": [_rec_dict(r, f.rank) for f in report.findings for r in f.recommendations],
        "suppressed": [{"rule_id": r.rule_id, "subject": r.subject, "label": r.label} for r in report.suppressed],
        "hotspots": [_hotspot_dict(h) for h in report.hotspots],
        "compile_check": _compile_dict(report),
        "rule_sources": list(report.rule_sources),
        "plan": None,
    }
    return strict(doc)
