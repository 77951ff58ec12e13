"""`advisor recommend` output: a JSON document (also recommendations.json), a rich table, markdown.

Units are scaled here and only here: ms per step, % of the step.
"""
from __future__ import annotations

import math
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kernel_advisor.recommend.engine import Finding, Recommendation
from kernel_advisor.recommend.hotspots import Hotspot
from kernel_advisor.recommend.report import Report, action_predictions
from kernel_advisor.records.recommendations import SCHEMA_VERSION as RECOMMENDATIONS_SCHEMA

# recommendations.json's schema (records/recommendations.py): 2 added action, action_reason and
# measured on every recommendation, and plan; 3 names the evidence as ops.csv's columns now do.
JSON_SCHEMA_VERSION = RECOMMENDATIONS_SCHEMA
_DROP_FROM_EVIDENCE = ("settings",)
WITHIN_NOISE = "(within noise)"  # a saving no larger than the step's interval reaches below its median  # repeated on every recommendation; it lives under "run"


def json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return None if math.isnan(value) or math.isinf(value) else value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if hasattr(value, "item"):  # numpy scalars
        return json_safe(value.item())
    return str(value)


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
    trykernel/prediction.py read (rule_id, tier, estimated_gain_*, kernel_id, row_ids)."""
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


def report_to_dict(report: Report, run_dir: str | None = None) -> dict[str, Any]:
    ctx = report.ctx
    doc = {
        "schema_version": JSON_SCHEMA_VERSION,
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
    return json_safe(doc)


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms == 0 or abs(ms) >= 5e-4 else f"{ms:.1e}"  # small savings stay visible


def _pct(pct: float | None) -> str:
    return "—" if pct is None else f"{pct:.1f}"


def _pct_noted(f: Finding) -> str:
    """The % of the step, marked when the step's own noise could hide it."""
    return f"{_pct(f.saving_pct)} {WITHIN_NOISE}" if f.within_noise else _pct(f.saving_pct)


def _where(f: Finding) -> str:
    head = f.recommendations[0].label
    more = len(f.recommendations) - 1
    return head if more == 0 else f"{head} (+{more} more)"


def _total_line(report: Report) -> str:
    noted = (f" Savings marked {WITHIN_NOISE} are no larger than the step's own noise "
             f"({_ms(report.ctx.step_noise_s)} ms): ranked after the others."
             if any(f.within_noise for f in report.findings) else "")
    return (f"Total if all are applied: {_ms(report.total_saving_per_step_s)} ms per step "
            f"({_pct(report.total_saving_pct)} % of the step: {_step(report)}); "
            f"savings on the same op are counted once (Amdahl).{noted}")


def _step(report: Report) -> str:
    """"367.000 ms, median of 10 unprofiled steps": every "% step" divides by this."""
    basis = f", {report.ctx.step_basis}" if report.ctx.step_basis else ""
    return f"{report.ctx.step_s * 1e3:.3f} ms{basis}"


def findings_table(report: Report) -> Table:
    table = Table(title="Recommendations, by estimated time saved", show_lines=False)
    for col, justify in (("#", "right"), ("saves ms/step", "right"), ("% step", "right"),
                         ("rung", "left"), ("finding", "left"), ("where", "left"), ("rule", "left")):
        table.add_column(col, justify=justify)
    for f in report.findings:
        table.add_row(str(f.rank), _ms(f.saving_per_step_s), _pct_noted(f), f.tier, f.title,
                      _where(f), f.rule_id)
    return table


def hotspots_table(report: Report) -> Table:
    table = Table(title="Hotspots: the rung chosen and why cheaper rungs were passed over")
    for col in ("op", "% time", "verdict", "eff", "rung", "why", "passed over"):
        table.add_column(col)
    for h in report.hotspots:
        eff = "—" if h.efficiency_frac is None else f"{h.efficiency_frac:.0%}"
        passed = "\n".join(f"{t}: {r}" for t, r in h.passed_over) or "—"
        table.add_row(f"{h.name}\n{h.input_shapes}", _pct(h.share_pct), h.verdict, eff, h.chosen_tier, h.why, passed)
    return table


def render_table(report: Report, console: Console) -> None:
    if not report.findings:
        console.print("No rule fired on this run.")
    else:
        console.print(findings_table(report))
        for f in report.findings:
            if f.tier == "leave-it":
                continue
            top = f.recommendations[0]
            # Styled as Text, not markup: titles and ids come from rule files.
            console.print(Text.assemble((f"{f.rank}. {f.title}", "bold"), " ",
                                        (f"({f.rule_id}, {top.gain_basis})", "dim")), highlight=False)
            console.print(f"   {top.message}", highlight=False, markup=False)
            for caveat in top.caveats:
                console.print(f"   caveat: {caveat}", highlight=False, markup=False)
    console.print(hotspots_table(report))
    console.print(_total_line(report), highlight=False)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: Report) -> str:
    lines = ["# kernel_advisor recommendations", "",
             f"Device: {report.ctx.device_name or report.ctx.device_type}; model: {report.ctx.model_file}; "
             f"step {_step(report)}.", "",
             "| # | saves ms/step | % step | rung | finding | where | rule |", "|---|---|---|---|---|---|---|"]
    for f in report.findings:
        lines.append(f"| {f.rank} | {_ms(f.saving_per_step_s)} | {_pct_noted(f)} | {f.tier} | "
                     f"{_md_cell(f.title)} | {_md_cell(_where(f))} | `{f.rule_id}` |")
    lines += ["", _total_line(report), "", "## Details", ""]
    for f in report.findings:
        top = f.recommendations[0]
        lines.append(f"{f.rank}. **{_md_cell(f.title)}** (`{f.rule_id}`; {_md_cell(top.gain_basis)}): "
                     f"{_md_cell(top.message)}")
        lines += [f"   - caveat: {c}" for c in top.caveats]
        lines += [f"   - {ref}" for ref in top.references]
    lines += ["", "## Hotspots", "", "| op | % time | verdict | rung | why | passed over |",
              "|---|---|---|---|---|---|"]
    for h in report.hotspots:
        passed = "; ".join(f"{t}: {r}" for t, r in h.passed_over) or "—"
        lines.append(f"| `{h.name}` {h.input_shapes} | {_pct(h.share_pct)} | {h.verdict} | {h.chosen_tier} | "
                     f"{_md_cell(h.why)} | {_md_cell(passed)} |")
    return "\n".join(lines) + "\n"
