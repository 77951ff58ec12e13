"""`recommend()`: a run's tables and settings in, a ranked Report out. No printing here."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import pandas as pd
from reference_kernels.registry import KernelSpec

from kernel_advisor.actions import fixed_by
from kernel_advisor.recommend.engine import (
    Finding, Recommendation, build_engine, rank_findings, run_rules, step_factor, union_saving)
from kernel_advisor.recommend.evidence import RunContext
from kernel_advisor.recommend.gain import gain_frac_of_step
from kernel_advisor.recommend.explain import CompileReport
from kernel_advisor.recommend.hotspots import Hotspot, hotspots
from kernel_advisor.recommend.schema import Rule


@dataclass(frozen=True)
class Report:
    ctx: RunContext
    findings: tuple[Finding, ...]  # ranked
    suppressed: tuple[Recommendation, ...]
    hotspots: tuple[Hotspot, ...]
    row_saving_per_step_s: Mapping[str, float]  # the Amdahl union: per row, the largest claim
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


def action_row_saving_per_step_s(report: Report, action: str) -> dict[str, float]:
    """Per row, the largest saving claimed by a recommendation that `action` carries out.

    Recommendations a cheaper rung covers count too: applying compile fuses a chain inside an
    attention pattern whether or not the list shows that chain.
    """
    names = fixed_by(action)
    standing = (r for f in report.findings for r in f.recommendations)
    covered = (r for r in report.suppressed if "covered_by" in r.evidence)
    best: dict[str, float] = {}
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
