"""try-kernel results for people: one table row per variant, then the notes that matter."""
from __future__ import annotations

import math

from rich.table import Table
from rich.text import Text

from kernel_advisor.render.units import fmt_ratio, fmt_si, fmt_time_s
from kernel_advisor.trykernel.results import TryReport, VariantResult
from kernel_advisor.collect.loop_timing import Estimate
from reference_kernels.registry import EAGER_ROUTE

STATUS_STYLE = {"passed": "green", "FAILED": "bold red", "not applied": "yellow", "baseline": "cyan"}
VERDICT_STYLE = {"faster": "green", "slower": "red", "no measurable difference": "dim"}


def try_table(report: TryReport) -> Table:
    table = Table(title=f"try-kernel — {report.model} ({report.mode}, {report.dtype}) on {report.device}",
                  caption=f"timing: {report.timing}", show_lines=False)
    for col, justify in (("variant", "left"), ("status", "left"), ("calls", "right"), ("max error", "right"),
                         ("op time", "right"), ("step time [95% CI]", "right"), ("speedup [95% CI]", "right"),
                         ("gain predicted → measured", "right"), ("peak mem", "right")):
        table.add_column(col, justify=justify, overflow="fold")
    for v in report.variants:
        table.add_row(_variant(v), Text(v.status, style=STATUS_STYLE.get(v.status, "")), _calls(v), _errors(v),
                      _op(v), _step(v), _speedup(v), _gain(v), fmt_si(v.peak_memory_bytes, "B"))
    return table


def note_lines(report: TryReport) -> list[str]:
    """Why each variant failed, fell back, was not timed or looks suspect; then global notes."""
    lines = []
    for v in report.variants:
        if v.status in ("FAILED", "not applied") and v.reason:
            lines.append(f"{v.name}: {v.status} — {v.reason}")
        other = [r for r in v.fallback_reasons if not r.startswith(EAGER_ROUTE)]
        if other and v.status != "not applied":  # not applied: the reason says it
            lines.append(f"{v.name}: fell back to PyTorch for {v.fallback_calls - v.eager_routed_calls} call(s): "
                         + "; ".join(other))
        if v.eager_routes and v.status != "not applied":
            lines.append(f"{v.name}: left {v.eager_routed_calls} call(s) to eager, on shapes where the registry "
                         "says the kernel loses: " + "; ".join(r[len(EAGER_ROUTE):] for r in v.eager_routes))
        idle = [k for k, n in v.member_calls if n == 0]
        if v.kind == "combined" and v.calls and idle:
            lines.append(f"{v.name}: {', '.join(idle)} never ran here (another kernel replaced what it replaces)")
        if v.suspect:
            lines.append(f"{v.name}: suspect — {v.suspect}")
        if v.compile_s is not None:
            lines.append(f"{v.name}: compile time {fmt_time_s(v.compile_s)} (first call; not in the step times)")
        if v.timing_label.startswith("not timed") and v.kind not in ("eager",) and v.status == "passed":
            lines.append(f"{v.name}: {v.timing_label}")
    if report.float64_reference:
        lines.append(_reference_note(report.float64_reference))
    return lines + list(report.notes)


def _reference_note(reason: str) -> str:
    """reference.py's reason: the rung in use (sampled, float32 with its tolerance) or "none: why"."""
    note = f"gate reference: {reason}"
    return note + "; the gate compares with eager only" if reason.startswith("none") else note


def _variant(v: VariantResult) -> Text:
    text = Text(v.name, style="bold")
    if v.targets:
        text.append("\n" + ", ".join(v.targets), style="dim")
    return text


def _calls(v: VariantResult) -> str:
    if v.kind in ("eager", "compile"):
        return ""
    return f"{v.calls}" + (f" (+{v.fallback_calls} fallback)" if v.fallback_calls else "")


def _errors(v: VariantResult) -> str:
    g = v.gate
    if g is None or g.draws == 0:
        return "–"
    text = f"abs {_g(g.max_abs_err)}\nrel {_g(g.rel_err)}"
    if _finite(g.ref_rel_err):
        text += f"\nvs fp64 {_g(g.ref_rel_err)} (eager {_g(g.baseline_ref_rel_err)})"
    return text


def _op(v: VariantResult) -> str:
    if v.op is None:
        return "–"
    return f"{fmt_time_s(v.op.baseline_s)} → {fmt_time_s(v.op.variant_s)}\n({_x(v.op.speedup)})"


def _step(v: VariantResult) -> str:
    e = v.step_s
    return "–" if e is None else f"{fmt_time_s(e.value)}\n[{fmt_time_s(e.low)}, {fmt_time_s(e.high)}]"


def _speedup(v: VariantResult) -> Text:
    e: Estimate | None = v.speedup
    if e is None:
        return Text("–")
    text = Text(f"{fmt_ratio(e.value, e.low, e.high, sep=', ')}\n")
    text.append(v.verdict, style=VERDICT_STYLE.get(v.verdict, ""))
    if v.suspect:
        text.append(" (suspect)", style="bold yellow")
    return text


def _gain(v: VariantResult) -> str:
    p = v.prediction
    if p is None:
        return "–"
    return f"{_signed_frac_pct(p.predicted_gain_frac)} → {_signed_frac_pct(p.measured_gain_frac)}"


def _signed_frac_pct(frac: float) -> str:
    return "–" if not _finite(frac) else f"{100 * frac:+.1f}%"


def _x(ratio: float) -> str:
    return "–" if not _finite(ratio) else f"{ratio:.2f}×"


def _g(x: float) -> str:
    return "–" if not _finite(x) else f"{x:.2e}"


def _finite(x) -> bool:
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def try_markdown(report: TryReport) -> str:
    """The same rows as the terminal table, as a GitHub markdown table plus the notes."""
    head = ["variant", "status", "calls", "rel err (vs fp64; eager)", "op time eager → variant",
            "step time [95% CI]", "speedup [95% CI]", "gain predicted → measured", "peak mem"]
    lines = [f"**{report.model}** — {report.mode}, {report.dtype}, {report.device}; timing: {report.timing}", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in report.variants:
        cells = [v.name + (f" ({', '.join(v.targets)})" if v.targets else ""), v.status, _calls(v) or "",
                 _errors(v).replace("\n", "; "), _op(v).replace("\n", " "), _step(v).replace("\n", " "),
                 _speedup(v).plain.replace("\n", " "), _gain(v), fmt_si(v.peak_memory_bytes, "B")]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    notes = note_lines(report)
    return "\n".join(lines + ([""] + [f"- {n}" for n in notes] if notes else [])) + "\n"
