"""`advisor recommend` output: a rich table and markdown (the JSON document: recommend/report.py).

Units are scaled here and only here: ms per step, % of the step.
"""
from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kernel_advisor.recommend.engine import Finding
from kernel_advisor.recommend.report import Report

WITHIN_NOISE = "(within noise)"  # a saving no larger than the step's interval reaches below its median


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
