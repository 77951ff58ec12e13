"""recommendations.json after `--measure`: every entry's outcome, the measured ranking and the plan.

The measurement (measure/advice.py) keys outcomes by (rule id, subject); the document built
here (schema: records/recommendations.py) is what recommendations.json holds and `--format json`
prints.
"""
from __future__ import annotations

from typing import Any

from kernel_advisor.experiment.trial import Outcome
from kernel_advisor.measure.advice import AdviceMeasurement, finding_gain, rec_key
from kernel_advisor.recommend.engine import Finding
from kernel_advisor.recommend.report import Report
from kernel_advisor.records.base import strict


def measured_json(doc: dict[str, Any], report: Report, m: AdviceMeasurement) -> dict[str, Any]:
    """The recommend JSON document with `measured` filled, a plan, and the measured ranking. Each
    entry is matched to its recommendation by (rule id, subject), as the measurement keys them."""
    order = {rule_id: i + 1 for i, rule_id in enumerate(m.ranking)}
    entries = {(e["rule_id"], e["subject"]): e for e in doc["recommendations"]}
    recs = []
    for rec in (r for f in report.findings for r in f.recommendations):
        entry, outcome = entries[rec_key(rec)], m.outcome_of(rec)
        recs.append({**entry, "action": m.action_of(rec), "predicted_rank": entry["rank"],
                     "rank": order[rec.rule_id], "measured": outcome.to_json() if outcome else None})
    findings = [_finding_entry(f, report, m, order) for f in doc["findings"]]
    plan = m.measured.plan
    return strict({
        **doc,
        "findings": sorted(findings, key=lambda f: f["rank"]),
        "recommendations": sorted(recs, key=lambda r: r["rank"]),
        "also": [{"action": a, "measured": o.to_json()} for a, o in m.also.items()],
        "actions": [{"action": a, "predicted_gain_frac": m.predicted.get(a), "measured": o.to_json()}
                    for a, o in actions_ranked(m)],
        "plan": {"actions": list(plan.actions), "rules": list(m.plan_rules), "measured": plan.outcome.to_json()},
        "measurement": m.measured.to_json(),
    })


def _finding_entry(entry: dict[str, Any], report: Report, m: AdviceMeasurement, order: dict) -> dict[str, Any]:
    """A finding is measured as its best subject: one rule, one action, the whole model timed."""
    f = next(f for f in report.findings if f.rule_id == entry["rule_id"])
    outcome = finding_outcome(f, m)
    return {**entry, "actions": list(dict.fromkeys(m.action_of(r) for r in f.recommendations)),
            "predicted_rank": entry["rank"], "rank": order[f.rule_id],
            "measured_gain_frac": finding_gain(f, m.by_recommendation),
            "measured": outcome.to_json() if outcome else None}


def finding_outcome(f: Finding, m: AdviceMeasurement) -> Outcome | None:
    """The outcome shown for a finding: the best measured one among its subjects."""
    outcomes = [o for r in f.recommendations if (o := m.outcome_of(r)) is not None]
    timed = [o for o in outcomes if o.speedup is not None]
    if timed:
        return max(timed, key=lambda o: o.speedup.value)
    return outcomes[0] if outcomes else None


def actions_ranked(m: AdviceMeasurement) -> list[tuple[str, Outcome]]:
    """Every measured action, largest measured gain first, the untimed after in measuring order."""
    items = list(m.measured.outcomes.items())
    return sorted(items, key=lambda item: -(item[1].gain_frac if item[1].gain_frac is not None else -2.0))
