"""`advisor compare` output: rich tables for the terminal, or one JSON document."""
from __future__ import annotations

import json
import math
from dataclasses import asdict
from typing import Any

import pandas as pd
from rich.table import Table
from rich.text import Text

from kernel_advisor.analyze.compare import RunComparison
from kernel_advisor.render.report_sections import dtype_text, shapes_text
from kernel_advisor.render.profile_render import step_text
from kernel_advisor.render.units import fmt_pct, fmt_time_s, shorten

OP_JSON_COLUMNS = ("name", "input_shapes", "input_dtypes", "region", "in_a", "in_b", "calls_per_step_a",
                   "calls_per_step_b", "time_per_step_a_s", "time_per_step_b_s", "delta_per_step_s", "ratio",
                   "share_a_pct", "share_b_pct")


def _signed_time(delta_s: float) -> Text:
    if math.isnan(delta_s):
        return Text("–")
    style = "green" if delta_s < 0 else "red" if delta_s > 0 else ""
    return Text(("+" if delta_s > 0 else "") + fmt_time_s(delta_s), style=style)


def _gain(gain_s: float) -> Text:
    """A saving: green when time was saved, red when it was lost."""
    if math.isnan(gain_s):
        return Text("–")
    return Text(fmt_time_s(gain_s), style="green" if gain_s > 0 else "red" if gain_s < 0 else "")


def _ratio_text(ratio: float) -> str:
    return "–" if ratio is None or math.isnan(ratio) else f"{ratio:.3f}×"


def headline(cmp: RunComparison) -> str:
    """One line: step time A → B and what it means (nothing, when the intervals overlap)."""
    step = f"step {fmt_time_s(cmp.step_a_s)} → {fmt_time_s(cmp.step_b_s)}"
    verdict = cmp.step_verdict
    if verdict == "no step times" or not cmp.speedup > 0:  # NaN: a run without step times
        said = "no step times to compare"
    elif verdict == "no measurable difference":
        said = f"no measurable difference: the step intervals overlap (B/A = {cmp.step_ratio:.3f})"
    else:
        faster = cmp.speedup >= 1
        said = (f"B is {cmp.speedup:.2f}× faster" if faster else f"B is {1 / cmp.speedup:.2f}× slower") + \
            f" (B/A = {cmp.step_ratio:.3f}"
        said += ", no interval to test it against)" if verdict == "no interval" else ")"
    device = f"device time/step {fmt_time_s(cmp.device_per_step_a_s)} → {fmt_time_s(cmp.device_per_step_b_s)}"
    return f"{step}: {said} · {device}"


def runs_text(cmp: RunComparison) -> str:
    """Each run's directory and its step time with interval and basis."""
    return f"A: {cmp.run_a} — {step_text(cmp.step_a)}\nB: {cmp.run_b} — {step_text(cmp.step_b)}"


def compare_warnings(cmp: RunComparison) -> list[str]:
    """One line each; the CLI prints them on stderr."""
    change = cmp.model_change
    if change is None:
        return []
    return [f"the runs profiled different model files: A {change.file_a} (sha256 {change.sha256_a[:12]}…), "
            f"B {change.file_b} (sha256 {change.sha256_b[:12]}…); the differences below include the code change"]


def _status(row: Any) -> str:
    return "both" if row.in_a and row.in_b else "only A" if row.in_a else "only B"


def _op_cells(row: Any) -> tuple[str, str, str]:
    return shorten(str(row.name), 44), shorten(shapes_text(row.input_shapes), 30), dtype_text(row.input_dtypes)


def op_delta_table(ops: pd.DataFrame, top: int, title: str) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold")
    table.add_column("op", min_width=16)
    table.add_column("shapes", max_width=28)
    table.add_column("dtype")
    for col in ("A/step", "B/step", "Δ", "B/A"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("in")
    for row in ops.head(top).itertuples(index=False):
        table.add_row(*_op_cells(row), fmt_time_s(row.time_per_step_a_s) if row.in_a else "–",
                      fmt_time_s(row.time_per_step_b_s) if row.in_b else "–", _signed_time(row.delta_per_step_s),
                      _ratio_text(row.ratio), _status(row))
    return table


def hotspot_change_table(ops: pd.DataFrame, side: str, title: str) -> Table:
    table = Table(title=title, title_justify="left", header_style="bold")
    for col, justify in (("op", "left"), ("shapes", "left"), ("dtype", "left"), ("time/step", "right"),
                         ("share", "right")):
        table.add_column(col, justify=justify)
    for row in ops.itertuples(index=False):
        table.add_row(*_op_cells(row), fmt_time_s(getattr(row, f"time_per_step_{side}_s")),
                      fmt_pct(getattr(row, f"share_{side}_pct")))
    return table


def context_table(cmp: RunComparison) -> Table:
    table = Table(title="What else changed (run.json)", title_justify="left", header_style="bold")
    for col in ("setting", "A", "B"):
        table.add_column(col)
    for change in cmp.context_changes:
        table.add_row(f"{change.section}.{change.key}", str(change.a), str(change.b))
    return table


def recommendation_table(cmp: RunComparison) -> Table:
    table = Table(title="Run A's recommendations: estimated vs observed", title_justify="left",
                  header_style="bold", caption="ops scope: time of the ops the rule named (a replacement op "
                  "appears under new hotspots); run scope: each run's step time", caption_justify="left")
    for col, justify in (("rule", "left"), ("scope", "left"), ("est. gain", "right"), ("before", "right"),
                         ("after", "right"), ("observed gain", "right")):
        table.add_column(col, justify=justify)
    for o in cmp.recommendations or ():
        scope = f"{o.ops_matched} op(s)" if o.scope == "ops" else "run"
        table.add_row(shorten(o.rule_id or o.title, 36), scope, fmt_time_s(o.estimated_gain_s),
                      fmt_time_s(o.before_s), fmt_time_s(o.after_s), _gain(o.observed_gain_s))
    return table


def compare_renderables(cmp: RunComparison, top: int) -> list:
    """What `advisor compare` prints, in order (empty sections left out)."""
    out: list = [Text(runs_text(cmp)), Text(headline(cmp), style="bold")]
    if cmp.context_changes:
        out.append(context_table(cmp))
    out.append(op_delta_table(cmp.ops, top, f"Largest changes in device time per step (top {top})"))
    if not cmp.new_hotspots.empty:
        out.append(hotspot_change_table(cmp.new_hotspots, "b", "New hotspots (only in B)"))
    if not cmp.vanished_hotspots.empty:
        out.append(hotspot_change_table(cmp.vanished_hotspots, "a", "Vanished hotspots (only in A)"))
    if cmp.recommendations:
        out.append(recommendation_table(cmp))
    return out


def _records(frame: pd.DataFrame, top: int | None = None) -> list[dict]:
    shown = frame if top is None else frame.head(top)
    columns = [c for c in OP_JSON_COLUMNS if c in shown.columns]
    return shown[columns].to_dict(orient="records")


def _clean(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj.item() if hasattr(obj, "item") else obj


def _step_json(step) -> dict | None:
    return None if step is None else {**step.to_json(), "basis": step.basis()}


def compare_json(cmp: RunComparison, top: int) -> str:
    outcomes = None if cmp.recommendations is None else [
        {**asdict(o), "observed_gain_s": o.observed_gain_s} for o in cmp.recommendations]
    doc = {"run_a": cmp.run_a, "run_b": cmp.run_b, "step_a_s": cmp.step_a_s, "step_b_s": cmp.step_b_s,
           "step_a": _step_json(cmp.step_a), "step_b": _step_json(cmp.step_b), "step_verdict": cmp.step_verdict,
           "step_ratio": cmp.step_ratio, "speedup": cmp.speedup,
           "model_change": None if cmp.model_change is None else asdict(cmp.model_change),
           "warnings": compare_warnings(cmp),
           "device_per_step_a_s": cmp.device_per_step_a_s, "device_per_step_b_s": cmp.device_per_step_b_s,
           "context_changes": [asdict(c) for c in cmp.context_changes],
           "ops": _records(cmp.ops, top), "ops_total": len(cmp.ops),
           "new_hotspots": _records(cmp.new_hotspots), "vanished_hotspots": _records(cmp.vanished_hotspots),
           "recommendations": outcomes}
    return json.dumps(_clean(doc), indent=2, default=str)
