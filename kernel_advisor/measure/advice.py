"""`recommend --measure`: every recommendation's action measured in the real model, then ranked by it.

The actions among the top recommendations are searched by the experiment engine
(experiment/): each alone, every compile mode, and their combinations. Each action's
outcome alone is attached to every recommendation naming it; a recommendation whose action
another mode of its rung beat clearly carries that mode and says so (modes.py). A recommendation with no action, or
beyond `--top`, gets a status and the reason. Findings are re-ranked: measured gains
first (largest first), then the rest in their predicted order.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from kernel_advisor.actions import NONE, is_distributed, is_known
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.experiment.engine import SearchResult, measure_actions
from kernel_advisor.experiment.search import SearchOptions
from kernel_advisor.experiment.trial import Outcome, Progress
from kernel_advisor.measure.modes import credit_note, credited
from kernel_advisor.recommend.engine import Finding, Recommendation
from kernel_advisor.recommend.report import Report, action_gain_frac


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
