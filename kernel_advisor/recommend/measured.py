"""`recommend --measure`: every recommendation's action measured in the real model, then ranked by it.

The actions among the top recommendations are searched by the experiment engine
(experiment/): each alone, every compile mode, and their combinations. Each action's
outcome alone is attached to every recommendation naming it; a recommendation whose action
another mode of its rung beat clearly carries that mode and says so (credited, below). A recommendation with no action, or
beyond `--top`, gets a status and the reason. Findings are re-ranked: measured gains
first (largest first), then the rest in their predicted order.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import torch

from kernel_advisor.actions import NONE, get_action, is_distributed, is_known
from kernel_advisor.collect.loader import LoadedModel, file_sha256, load_model
from kernel_advisor.errors import EnvironmentCapabilityError, UserInputError
from kernel_advisor.experiment.engine import SearchResult, measure_actions
from kernel_advisor.experiment.search import SearchOptions
from kernel_advisor.experiment.trial import Outcome, Progress
from kernel_advisor.recommend.engine import Finding, Recommendation
from kernel_advisor.recommend.report import Report, action_gain_frac
from kernel_advisor.records.base import strict
from kernel_advisor.records.run import RunMeta


RankMeasure = Callable[[Sequence[str]], Mapping[str, Outcome]]  # data-parallel actions -> outcomes


@dataclass(frozen=True)
class AdviceMeasurement:
    by_recommendation: Mapping[tuple[str, str], Outcome]  # (rule_id, subject) -> outcome
    also: Mapping[str, Outcome]  # actions measured on request, recommended or not
    measured: SearchResult
    ranking: tuple[str, ...]  # rule ids, measured best first
    plan_rules: tuple[str, ...]  # the rules whose actions make up the plan
    predicted: Mapping[str, float | None]  # per measured action: its predicted gain, fraction of the step
    actions: Mapping[tuple[str, str], str]  # (rule_id, subject) -> the action credited (modes.py)

    def outcome_of(self, rec: Recommendation) -> Outcome | None:
        return self.by_recommendation.get(rec_key(rec))

    def action_of(self, rec: Recommendation) -> str:
        """The action the measurement credits: the rule's, or a mode of it that measured clearly faster."""
        return self.actions.get(rec_key(rec), rec.action)


def actions_to_measure(report: Report, top: int) -> tuple[list[str], set[str]]:
    """(actions of the top `top` findings in predicted order, actions of the findings beyond)."""
    ranked = [a for f in report.findings[:top] for a in _actions(f)]
    beyond = {a for f in report.findings[top:] for a in _actions(f)}
    return list(dict.fromkeys(ranked)), beyond - set(ranked)


def measure_report(report: Report, loaded: LoadedModel, mode: str, options: SearchOptions, top: int,
                   also: Sequence[str] = (), progress: Progress | None = None, busy_frac: float | None = None,
                   run_dir: Path | None = None, on_ranks: RankMeasure | None = None) -> AdviceMeasurement:
    """`on_ranks` (a distributed run's) measures the data-parallel actions on the run's ranks, first;
    without it they go to the single-process search, which reports them not measurable."""
    names, beyond = actions_to_measure(report, top)
    wanted = list(dict.fromkeys([*names, *also]))
    ranked = [n for n in wanted if is_distributed(n)] if on_ranks is not None else []
    on_ranks_out = on_ranks(ranked) if ranked else {}
    measured = measure_actions(loaded, mode, [n for n in wanted if n not in ranked], options, busy_frac, run_dir,
                               progress)
    if on_ranks_out:
        measured = dataclasses.replace(measured, outcomes={**measured.outcomes, **on_ranks_out})
    recs = [r for f in report.findings for r in f.recommendations]
    actions = {rec_key(r): credited(r.action, measured.outcomes) for r in recs}
    by_rec = {rec_key(r): _credited_outcome(r, actions[rec_key(r)], measured.outcomes, beyond, top) for r in recs}
    ranking = rerank(report.findings, by_rec)
    plan_rules = tuple(dict.fromkeys(r.rule_id for r in recs if actions[rec_key(r)] in measured.plan.actions))
    predicted = {a: action_gain_frac(report, a) for a in measured.outcomes if is_known(a)}
    also_out = {a: measured.outcomes.get(a, Outcome("not-measurable", "not reached")) for a in also}
    return AdviceMeasurement(by_rec, also_out, measured, ranking, plan_rules,
                             predicted, actions)


def rec_key(rec: Recommendation) -> tuple[str, str]:
    return rec.rule_id, rec.subject


def _credited_outcome(rec: Recommendation, action: str, outcomes: Mapping[str, Outcome], beyond: set[str],
                      top: int) -> Outcome:
    """The outcome of the mode the recommendation is credited with, saying so when it is not its own."""
    outcome = _outcome_for(rec, outcomes, beyond, top)
    if action == rec.action:
        return outcome
    return outcomes[action].with_note(credit_note(rec.action, action, outcomes))


def _actions(f: Finding) -> list[str]:
    return [r.action for r in f.recommendations if r.action != NONE]


def _outcome_for(rec: Recommendation, outcomes: Mapping[str, Outcome], beyond: set[str], top: int) -> Outcome:
    if rec.action == NONE:
        return Outcome("not-measurable", rec.action_reason or "the rule names no action")
    if rec.action in outcomes:
        return outcomes[rec.action]
    if rec.action in beyond:
        return Outcome("not-measurable", f"not measured: outside the top {top} recommendations (--top)")
    return Outcome("not-measurable", f"{rec.action} was not reached: the search was interrupted")


def finding_gain(f: Finding, by_rec: Mapping[tuple[str, str], Outcome]) -> float | None:
    gains = [o.measured_gain for r in f.recommendations
             if (o := by_rec.get(rec_key(r))) is not None and o.measured_gain is not None]
    return max(gains) if gains else None


def rerank(findings: Sequence[Finding], by_rec: Mapping[tuple[str, str], Outcome]) -> tuple[str, ...]:
    """Rule ids: measured faster first, by measured gain; then the rest, keeping predicted order."""
    def key(item):
        index, f = item
        gain = finding_gain(f, by_rec)
        faster = any((o := by_rec.get(rec_key(r))) is not None and o.verdict == "faster" for r in f.recommendations)
        return (0, -(gain or 0.0), index) if faster else (1, 0.0, index)

    return tuple(f.rule_id for _, f in sorted(enumerate(findings), key=key))


# ------------------------------------------------------------
# Modes of one rung measured side by side, and which one a recommendation is credited with.
#
# An action's `refinements` (compile's CUDA-graph mode) are measured beside it on CUDA. A
# recommendation naming the action is credited with a refinement only when that measured clearly
# faster (95 % intervals apart); a tie stays with the action the rule named, the cheaper mode.

def credited(name: str, outcomes: Mapping[str, Outcome]) -> str:
    """`name`, or the refinement of it that measured clearly faster than it."""
    if name == NONE or name not in outcomes:
        return name
    best = name
    for r in get_action(name).refinements:
        if _clearly_faster(outcomes.get(r), outcomes[best]):
            best = r
    return best


def credit_note(name: str, chosen: str, outcomes: Mapping[str, Outcome]) -> str:
    """Why a recommendation naming `name` carries `chosen`'s measurement, e.g. "measured as
    compile:reduce-overhead: 1.41× [1.38–1.44], against compile's 0.98× [0.95–1.01]"."""
    return (f"measured as {chosen}: {_speedup(outcomes[chosen])}, "
            f"against {name}'s {_speedup(outcomes[name])}")


def _clearly_faster(a: Outcome | None, b: Outcome) -> bool:
    if a is None or a.status != "passed" or a.verdict != "faster" or a.speedup is None:
        return False
    if b.status != "passed" or b.verdict != "faster" or b.speedup is None:
        return True
    return a.speedup.low > b.speedup.high


def _speedup(o: Outcome) -> str:
    if o.speedup is None:
        return o.status if o.status != "passed" else "untimed"
    s = o.speedup
    return f"{s.value:.3g}× [{s.low:.3g}–{s.high:.3g}]"


# ------------------------------------------------------------
# recommendations.json after `--measure`: every entry's outcome, the measured ranking and the plan.
#
# The measurement (above) keys outcomes by (rule id, subject); the document built
# here (schema: records/recommendations.py) is what recommendations.json holds and `--format json`
# prints.

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


# ------------------------------------------------------------
# Re-load a run's model as it was profiled: the file, entry, device, dtype, autocast and mode in run.json.

def load_run_model(meta: Mapping[str, Any], run_dir: Path) -> tuple[LoadedModel, str, list[str]]:
    """(loaded model, mode, notes for people) for the run described by `meta` (run.json)."""
    meta = RunMeta.of(meta)
    model, args = meta.model, meta.args
    file = meta.model_file
    if not file:
        raise UserInputError(f"{run_dir}: run.json names no model file (an imported trace?)",
                             "profile the model with `advisor profile MODEL.py` to measure its advice")
    path = Path(file)
    if not path.is_file():
        raise UserInputError(f"--measure needs the model file, and run.json names {file}, which is not here",
                             "run from the machine and directory you profiled on")
    device = args.get("device") or meta.device_type or "auto"
    if device == "cuda" and not torch.cuda.is_available():
        raise EnvironmentCapabilityError("the run was profiled on CUDA, and no CUDA device is visible here",
                                         "measure on the machine you profiled on")
    loaded = load_model(path, entry=model.get("entry"), device=device, dtype=args.get("dtype") or "keep",
                        seed=int(args.get("seed") or 0), autocast=args.get("autocast"))
    notes = []
    if model.get("sha256") and model["sha256"] != file_sha256(path):
        notes.append(f"{path.name} changed since it was profiled: measuring the file as it is now")
    return loaded, args.get("mode") or "inference", notes
