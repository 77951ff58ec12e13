"""`recommend --measure` output: predicted beside measured, in a rich table and markdown (the JSON
document: recommend/measured.py).

Units are scaled here and only here: % of the step, speedups as ×.
"""
from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kernel_advisor.experiment.trial import Outcome
from kernel_advisor.recommend.measured import AdviceMeasurement
from kernel_advisor.recommend.measured import actions_ranked, finding_outcome
from kernel_advisor.recommend.report import Report
from kernel_advisor.render.units import fmt_ratio


def speedup_text(o: Outcome | None) -> str:
    if o is None or o.speedup is None:
        return "—"
    s = o.speedup
    return fmt_ratio(s.value, s.low, s.high)


def result_text(o: Outcome | None) -> str:
    if o is None:
        return "—"
    if o.status == "passed":
        return o.verdict
    return f"{o.status}: {o.reason}"


def _gain_pct(frac: float | None) -> str:
    return "—" if frac is None else f"{100 * frac:.1f}"


def _rows(report: Report, m: AdviceMeasurement):
    by_id = {f.rule_id: f for f in report.findings}
    for rank, rule_id in enumerate(m.ranking, 1):
        f = by_id[rule_id]
        o = finding_outcome(f, m)
        action = m.action_of(f.recommendations[0])
        measured_gain = o.gain_frac if o is not None and o.status == "passed" else None
        yield (str(rank), rule_id, f.tier, action, "—" if f.saving_pct is None else f"{f.saving_pct:.1f}",
               _gain_pct(measured_gain), speedup_text(o), result_text(o))


HEADERS = ("#", "rule", "rung", "action", "predicted % step", "measured % step", "speedup [95 % CI]", "result")


def measured_table(report: Report, m: AdviceMeasurement) -> Table:
    table = Table(title="Recommendations, measured in the model (ranked by measured gain)")
    for col in HEADERS:
        table.add_column(col, justify="right" if col in ("#", "predicted % step", "measured % step") else "left")
    for row in _rows(report, m):
        table.add_row(*row)
    return table


def plan_line(m: AdviceMeasurement) -> str:
    plan = m.measured.plan
    if not plan.actions:
        return f"Plan: {plan.outcome.reason}."
    o = plan.outcome
    line = (f"Plan ({' + '.join(plan.actions)}): {speedup_text(o)}, {result_text(o)}"
            + (f", saves {_gain_pct(o.gain_frac)} % of the step" if o.gain_frac is not None else "") + ".")
    best = _best_single(m)
    if len(plan.actions) > 1 and best is not None and o.speedup is not None and o.speedup.high < best[1].speedup.low:
        line += f" {best[0]} alone measured faster ({speedup_text(best[1])}): apply it alone."
    return line


def _best_single(m: AdviceMeasurement):
    timed = [(a, o) for a, o in m.measured.outcomes.items() if o.speedup is not None and o.verdict == "faster"]
    return max(timed, key=lambda item: item[1].speedup.value, default=None)


def action_line(action: str, o: Outcome, predicted: float | None, also: bool) -> str:
    """One line, e.g. "compile: predicted 24.0 %, measured 31.2 % of the step (1.45× [1.40–1.51], faster)."""
    label = f"{action} (--also)" if also else action
    if o.status != "passed":
        return f"{label}: predicted {_gain_pct(predicted)} %, {result_text(o)}."
    if predicted is None and " + " in action:
        return f"{label}: measured {_gain_pct(o.gain_frac)} % of the step ({speedup_text(o)}, {o.verdict})."
    return (f"{label}: predicted {_gain_pct(predicted)} %, measured {_gain_pct(o.gain_frac)} % of the step "
            f"({speedup_text(o)}, {o.verdict}).")


def measurement_lines(m: AdviceMeasurement) -> list[str]:
    eager = m.measured.eager_step_s
    lines = [plan_line(m), search_line(m),
             "Each configuration on the whole model (predicted: the union of the rows its action fixes):"]
    lines += ["  " + action_line(a, o, m.predicted.get(a), a in m.also) for a, o in actions_ranked(m)]
    if eager is not None:
        lines.append(f"Eager step {_ms(eager)}{_sync_note(m)}; timing: {m.measured.timing}; "
                     f"reference: {m.measured.reference}.")
    return lines


def search_line(m: AdviceMeasurement) -> str:
    """"Search: 9 configurations timed, 4 pruned after a short timing, 2 skipped (budget) in 58 s of
    --budget-s 60; every trial in experiments.json, the compilers' log in measure.log (run directory)."""
    r = m.measured.record
    budget = f" of --budget-s {r.budget_s:g}" if r.budget_s is not None else ""
    state = "" if r.complete else " (interrupted: partial)"
    log = f", the compilers' log in {r.log}" if r.log else ""
    return (f"Search{state}: {r.explored} configurations timed, {r.pruned} pruned after a short timing, "
            f"{r.skipped} not timed in {r.elapsed_s:.0f} s{budget}; every trial in experiments.json{log} "
            "(run directory).")


def _ms(e) -> str:
    return f"{e.value * 1e3:.3f} ms [{e.low * 1e3:.3f}–{e.high * 1e3:.3f}]"


def _sync_note(m: AdviceMeasurement) -> str:
    """The synchronized step beside the back-to-back one, where the two differ by more than 5 %."""
    loop, sync = m.measured.eager_step_s, m.measured.eager_sync_step_s
    if sync is None or loop is None or loop.value <= 0 or abs(sync.value / loop.value - 1) <= 0.05:
        return ""
    return f" (synchronized after every step: {_ms(sync)})"


def render_measured(report: Report, m: AdviceMeasurement, console: Console) -> None:
    console.print(measured_table(report, m))
    for line in measurement_lines(m):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def measured_markdown(report: Report, m: AdviceMeasurement) -> str:
    cell = lambda text: str(text).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["## Measured in the model", "", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in _rows(report, m)]
    return "\n".join(lines + [""] + measurement_lines(m)) + "\n"
