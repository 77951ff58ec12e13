"""recommendations.json's document for a recommend Report (schema: records/recommendations.py).

Fractions here, as the record holds them (`estimated_gain_frac`); render/ scales them for people.
"""
from __future__ import annotations

from typing import Any

from kernel_advisor.recommend.engine import Finding, Recommendation
from kernel_advisor.recommend.hotspots import Hotspot
from kernel_advisor.recommend.report import Report, action_predictions
from kernel_advisor.records.base import strict
from kernel_advisor.records.recommendations import SCHEMA_VERSION

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
    """One entry of "recommendations"; key names follow what analyze/run_extras.py and
    trykernel/results.py read (rule_id, tier, estimated_gain_*, kernel_id, row_ids)."""
    evidence = {k: v for k, v in rec.evidence.items() if k not in _DROP_FROM_EVIDENCE}
    return {
        "rank": rank, "rule_id": rec.rule_id, "tier": rec.tier, "title": rec.title, "scope": rec.scope,
        "subject": rec.subject, "label": rec.label, "row_ids": _row_ids(rec), "message": rec.message,
        "estimated_gain_per_step_s": rec.saving_per_step_s, "estimated_gain_frac": _frac(rec.saving_pct),
        "row_gain_per_step_s": dict(rec.row_saving_per_step_s),
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
        "row_gain_per_step_s": dict(report.row_saving_per_step_s),
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
