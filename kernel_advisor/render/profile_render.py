"""The profile's hotspot table, summary line and JSON."""
from __future__ import annotations

import statistics

import pandas as pd
from rich.table import Table
from rich.text import Text

from kernel_advisor.collect.rundir import SCHEMA_VERSION
from kernel_advisor.records.base import json_text
from kernel_advisor.render.units import fmt_frac_pct, fmt_pct, fmt_si, fmt_time_s, shorten

VERDICT_STYLE = {"compute-bound": "green", "memory-bound": "cyan", "under-occupied": "blue", "latency-bound": "yellow",
                 "host-bound": "magenta", "unknown": "dim"}


def hotspot_table(ops: pd.DataFrame, top: int, title: str = "Top hotspots") -> Table:
    table = Table(title=title, title_justify="left", header_style="bold")
    analyzed = "verdict" in ops.columns
    for col, justify in (("#", "right"), ("op", "left"), ("shapes", "left"), ("dtype", "left"),
                         ("calls", "right"), ("time/step", "right"), ("share", "right")):
        table.add_column(col, justify=justify)
    if analyzed:
        for col in ("FLOP", "bytes", "FLOP/B", "achieved", "eff", "class"):
            table.add_column(col, justify="left" if col == "class" else "right")
    for i, row in enumerate(ops.head(top).itertuples(index=False), 1):
        cells = [str(i), shorten(row.name, 48), shorten(_shapes(row.input_shapes), 34), _dtype(row.input_dtypes),
                 str(row.calls), fmt_time_s(row.device_time_per_step_s), fmt_pct(row.share_pct)]
        if analyzed:
            cells += _analysis_cells(row)
        table.add_row(*cells)
    return table


def region_table(sequence: pd.DataFrame, ops: pd.DataFrame, top_ops: int = 3) -> Table:
    """NVTX / record_function regions with their device time and their top ops."""
    from kernel_advisor.analyze.regions import region_summary

    table = Table(title="Regions", title_justify="left", header_style="bold")
    for col, justify in (("region", "left"), ("time/step", "right"), ("ops", "right"), ("top ops", "left")):
        table.add_column(col, justify=justify)
    steps = max(int(sequence["step"].max()) + 1, 1) if len(sequence) else 1
    for r in region_summary(sequence).itertuples(index=False):
        inside = sequence[sequence["region"] == r.region]
        top = inside.groupby("name")["device_time_s"].sum().nlargest(top_ops)
        table.add_row(Text(r.region or "(outside any region)"), fmt_time_s(r.device_time_s / steps), str(r.ops),
                      Text(", ".join(top.index)))
    return table


def _analysis_cells(row) -> list:
    if not row.modelled:
        return ["–", "–", "–", "–", "–", Text("unknown", style="dim")]
    achieved = (fmt_si(row.achieved_flops_per_s, "FLOP/s") if row.verdict == "compute-bound"
                else fmt_si(row.achieved_bytes_per_s, "B/s"))
    return [fmt_si(row.flops, ""), fmt_si(row.bytes, "B"), f"{row.intensity:.3g}" if row.bytes else "–",
            achieved, fmt_frac_pct(row.efficiency_frac), Text(row.verdict, style=VERDICT_STYLE.get(row.verdict, ""))]


def _shapes(shapes) -> str:
    dims = [s for s in shapes if isinstance(s, list) and s]
    return " ".join("×".join(map(str, d)) if all(isinstance(x, int) for x in d) else "list" for d in dims)


def _dtype(dtypes) -> str:
    real = [d for d in dtypes if isinstance(d, str) and d not in ("", "scalar")]
    return real[0] if real else ""


def summary_line(meta: dict, run_dir) -> str:
    walls = meta.get("step_wall_s") or []
    step = fmt_time_s(statistics.median(walls)) if walls else "–"
    parts = [f"step {step} (median of {len(walls)})",
             f"device busy {fmt_frac_pct(meta.get('device_busy_frac'))}"]
    cov = meta.get("coverage") or {}
    if "modelled_time_pct" in cov:
        parts.append(f"{fmt_pct(cov['modelled_time_pct'], 0)} of device time modelled")
    ceil = meta.get("ceilings") or {}
    if ceil.get("source"):
        parts.append(f"ceilings: {ceil['source']}")
    ratio = meta.get("profiler_overhead_ratio")
    if ratio:
        parts.append(f"profiler overhead {ratio:.2f}×")
    parts.append(f"trace: {run_dir}/trace.json.gz (opens in Perfetto)")
    return " · ".join(parts)


def profile_json(meta: dict, ops: pd.DataFrame, run_dir, top: int) -> str:
    """`profile --json` / `import --json`: strict JSON (no NaN) with the run schema's version."""
    hot = ops.head(top).to_dict(orient="records")
    return json_text({"run_dir": str(run_dir), "run": meta, "hotspots": hot}, SCHEMA_VERSION)
