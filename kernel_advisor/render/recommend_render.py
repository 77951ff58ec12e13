"""`advisor recommend` output: a rich table and markdown (the JSON document: recommend/report.py).

Units are scaled here and only here: ms per step, % of the step.
"""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kernel_advisor.experiment.trial import Outcome
from kernel_advisor.recommend.engine import Finding
from kernel_advisor.recommend.measured import AdviceMeasurement, actions_ranked, finding_outcome
from kernel_advisor.recommend.report import Report
from kernel_advisor.render.units import fmt_ratio

WITHIN_NOISE = "(within noise)"  # a saving no larger than the step's interval reaches below its median


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms == 0 or abs(ms) >= 5e-4 else f"{ms:.1e}"  # small savings stay visible


def _pct_number(pct: float | None) -> str:
    return "—" if pct is None else f"{pct:.1f}"


def _pct_noted(f: Finding) -> str:
    """The % of the step, marked when the step's own noise could hide it."""
    return f"{_pct_number(f.saving_pct)} {WITHIN_NOISE}" if f.within_noise else _pct_number(f.saving_pct)


def _where(f: Finding) -> str:
    head = f.recommendations[0].label
    more = len(f.recommendations) - 1
    return head if more == 0 else f"{head} (+{more} more)"


def _total_line(report: Report) -> str:
    noted = (f" Savings marked {WITHIN_NOISE} are no larger than the step's own noise "
             f"({_ms(report.ctx.step_noise_s)} ms): ranked after the others."
             if any(f.within_noise for f in report.findings) else "")
    return (f"Total if all are applied: {_ms(report.total_saving_per_step_s)} ms per step "
            f"({_pct_number(report.total_saving_pct)} % of the step: {_step(report)}); "
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
        table.add_row(f"{h.name}\n{h.input_shapes}", _pct_number(h.share_pct), h.verdict, eff, h.chosen_tier, h.why, passed)
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
        lines.append(f"| `{h.name}` {h.input_shapes} | {_pct_number(h.share_pct)} | {h.verdict} | {h.chosen_tier} | "
                     f"{_md_cell(h.why)} | {_md_cell(passed)} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------
# `recommend --measure` output: predicted beside measured, in a rich table and markdown (the JSON
# document: recommend/measured.py).
#
# Units are scaled here and only here: % of the step, speedups as ×.

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
        lines.append(f"Eager step {_ms_interval(eager)}{_sync_note(m)}; timing: {m.measured.timing}; "
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


def _ms_interval(e) -> str:
    return f"{e.value * 1e3:.3f} ms [{e.low * 1e3:.3f}–{e.high * 1e3:.3f}]"


def _sync_note(m: AdviceMeasurement) -> str:
    """The synchronized step beside the back-to-back one, where the two differ by more than 5 %."""
    loop, sync = m.measured.eager_step_s, m.measured.eager_sync_step_s
    if sync is None or loop is None or loop.value <= 0 or abs(sync.value / loop.value - 1) <= 0.05:
        return ""
    return f" (synchronized after every step: {_ms_interval(sync)})"


def render_measured(report: Report, m: AdviceMeasurement, console: Console) -> None:
    console.print(measured_table(report, m))
    for line in measurement_lines(m):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def measured_markdown(report: Report, m: AdviceMeasurement) -> str:
    cell = lambda text: str(text).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["## Measured in the model", "", "| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in _rows(report, m)]
    return "\n".join(lines + [""] + measurement_lines(m)) + "\n"
