"""The profile's hotspot table, summary line, warnings and JSON."""
from __future__ import annotations

from typing import Any, Mapping

import pandas as pd
from rich.table import Table
from rich.text import Text

from kernel_advisor.analyze.ceilings import NOISY_SPREAD_FRAC
from kernel_advisor.collect.kernel_timing import PASS_KERNELS_ONLY
from kernel_advisor.collect.nesting import op_label
from kernel_advisor.collect.noise import noise_warning
from kernel_advisor.collect.rundir import SCHEMA_VERSION
from kernel_advisor.collect.step_time import (Ratio, StepTime, overhead_of, steady_state_of, steady_state_warning,
                                              step_time_of, sync_step_time_of)
from kernel_advisor.records.base import json_text
from kernel_advisor.records.run import RunMeta
from kernel_advisor.render.units import fmt_frac_pct, fmt_pct, fmt_ratio, fmt_si, fmt_time_s, shorten

MODELLED_WARN_PCT = 90.0  # below this share of device time modelled, profile and import warn
UNMODELLED_NAMED = 3  # unmodelled ops the warning names, largest first

VERDICT_STYLE = {"compute-bound": "green", "memory-bound": "cyan", "under-occupied": "blue", "latency-bound": "yellow",
                 "sequential": "red", "host-bound": "magenta", "unknown": "dim"}


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
        label = op_label(row.name, getattr(row, "backward_of", ""), getattr(row, "autograd_node", ""),
                         getattr(row, "autograd_internal", False))
        cells = [str(i), shorten(label, 48), shorten(_shapes(row.input_shapes), 34), _dtype(row.input_dtypes),
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
        top = inside.groupby("name")["device_time_per_call_s"].sum().nlargest(top_ops)
        table.add_row(Text(r.region or "(outside any region)"), fmt_time_s(r.device_time_total_s / steps), str(r.ops),
                      Text(", ".join(top.index)))
    return table


def _analysis_cells(row) -> list:
    if not row.modelled:
        return ["–", "–", "–", "–", "–", Text("unknown", style="dim")]
    achieved = (fmt_si(row.achieved_flops_per_s, "FLOP/s") if row.verdict == "compute-bound"
                else fmt_si(row.achieved_bytes_per_s, "B/s"))
    return [fmt_si(row.flops_per_call, ""), fmt_si(row.bytes_per_call, "B"),
            f"{row.intensity:.3g}" if row.bytes_per_call else "–",
            achieved, fmt_frac_pct(row.efficiency_frac), Text(row.verdict, style=VERDICT_STYLE.get(row.verdict, ""))]


def _shapes(shapes) -> str:
    dims = [s for s in shapes if isinstance(s, list) and s]
    return " ".join("×".join(map(str, d)) if all(isinstance(x, int) for x in d) else "list" for d in dims)


def _dtype(dtypes) -> str:
    real = [d for d in dtypes if isinstance(d, str) and d not in ("", "scalar")]
    return real[0] if real else ""


def summary_line(meta: RunMeta, run_dir) -> str:
    meta = RunMeta.of(meta)
    parts = [step_text(step_time_of(meta), sync_step_time_of(meta)),
             f"device busy {fmt_frac_pct(meta.device_busy_frac)}"]
    cov = meta.coverage
    if "modelled_time_pct" in cov:
        comm = cov.get("communication_time_pct") or 0.0
        inside = f" ({fmt_pct(comm, 0)} collectives, on the bus roof)" if comm >= 0.5 else ""
        parts.append(f"{fmt_pct(cov['modelled_time_pct'], 0)} of device time modelled{inside}")
    ceil = meta.ceilings
    if ceil.get("source"):
        parts.append(f"ceilings: {ceilings_text(ceil)}")
    if overhead_of(meta) is not None:
        parts.append(f"profiler overhead {overhead_figure_text(meta)}")
    parts.append(f"trace: {run_dir}/trace.json.gz (opens in Perfetto)")
    return " · ".join(parts)


def _when(created: Any) -> str:
    """"2026-11-25T11:37:19Z" → "2026-11-25 11:37 UTC"."""
    text = str(created or "")
    if len(text) >= 16 and text[10] == "T":
        return f"{text[:10]} {text[11:16]} UTC"
    return text or "at an unrecorded time"


def spread_text(spread_frac: Any) -> str:
    if not isinstance(spread_frac, (int, float)):
        return "spread not recorded"
    pct = 100 * float(spread_frac)
    return f"±{pct:.1f} %" if pct < 1 else f"±{pct:.0f} %"


def calibration_text(calibration: Any) -> str:
    """"measured 2026-11-25 11:37 UTC, ±3 %" for run.json's ceilings["calibration"]; "" without one."""
    if not isinstance(calibration, Mapping):
        return ""
    return f"measured {_when(calibration.get('created'))}, {spread_text(calibration.get('spread_frac'))}"


def ceilings_text(ceil: Mapping[str, Any]) -> str:
    """What the run's ceilings came from: "datasheet", or when and how noisily they were measured
    ("measured 2026-11-25 11:37 UTC, ±3 % (+datasheet)" when the datasheet filled the rest)."""
    source = str(ceil.get("source") or "unknown")
    measured = calibration_text(ceil.get("calibration"))
    if not measured or "measured" not in source:
        return source
    return measured + (" (+datasheet)" if source == "measured+datasheet" else "")


def calibration_warning(meta: Mapping[str, Any]) -> str | None:
    calibration = RunMeta.of(meta).ceilings.get("calibration")
    spread = calibration.get("spread_frac") if isinstance(calibration, Mapping) else None
    if not isinstance(spread, (int, float)) or spread <= NOISY_SPREAD_FRAC:
        return None
    return (f"the measured ceilings are noisy ({spread_text(spread)} over the calibration's repetitions, "
            f"{_when(calibration.get('created'))}): the machine was likely busy; rerun "
            "`advisor calibrate --force` on an idle machine, then profile again")


def run_warnings(meta: Mapping[str, Any]) -> list[str]:
    """One line per thing about the run a reader must know before trusting its numbers."""
    lines = [noise_warning(meta), steady_state_warning(steady_state_of(meta)), step_markers_warning(meta),
             calibration_warning(meta), kernel_timing_warning(meta)]
    shapes = shapes_warning(meta)
    lines.append(shapes if shapes else coverage_warning(meta))  # no shapes: the shapes line says why
    return [line for line in lines if line]


def step_markers_warning(meta: Mapping[str, Any]) -> str | None:
    """An imported trace with no ProfilerStep markers: per-step figures are whole-trace figures."""
    meta = RunMeta.of(meta)
    if meta.source != "import" or meta.step_markers or not meta.records_step_markers:
        return None
    given = meta.args.get("steps")
    if given:
        return (f"the trace has no ProfilerStep markers: it is taken as {given} steps (--steps {given}), so "
                f"per-step calls and times are whole-trace totals / {given}")
    return ("the trace has no ProfilerStep markers: per-op calls and times are totals over the whole trace; "
            "pass --steps N (the steps it covers), or record with a torch.profiler schedule and call "
            "prof.step() after every step")


def shapes_warning(meta: Mapping[str, Any]) -> str | None:
    if RunMeta.of(meta).shapes_recorded is not False:
        return None
    return ("the trace recorded no input shapes, so no op could be costed (0 % of device time modelled): "
            "record it with torch.profiler.profile(record_shapes=True, schedule=torch.profiler.schedule("
            "wait=1, warmup=1, active=5), on_trace_ready=...) and call prof.step() after every step")


def coverage_warning(meta: Mapping[str, Any], limit_pct: float = MODELLED_WARN_PCT) -> str | None:
    """Under `limit_pct` of device time modelled: name the largest unmodelled ops."""
    meta = RunMeta.of(meta)
    cov = meta.coverage
    pct = cov.get("modelled_time_pct")
    if not isinstance(pct, (int, float)) or pct >= limit_pct:
        return None
    unmodelled = [u for u in cov.get("unmodelled") or [] if isinstance(u, Mapping)]
    total_s = meta.total_device_time_s
    named = ", ".join(f"{u.get('name')} ({fmt_pct(_share_pct(u.get('device_time_total_s'), total_s), 0)})"
                      for u in unmodelled[:UNMODELLED_NAMED])
    more = len(unmodelled) - UNMODELLED_NAMED
    named += f", +{more} more" if more > 0 else ""
    return (f"only {fmt_pct(pct, 0)} of device time is modelled (below {limit_pct:g} %): no FLOPs, bytes or "
            f"roofline for {named}, so no verdict or gain estimate either")


def _share_pct(time_s: Any, total_s: float) -> float | None:
    return 100.0 * float(time_s) / total_s if isinstance(time_s, (int, float)) and total_s > 0 else None


def profile_json(meta: dict, ops: pd.DataFrame, run_dir, top: int) -> str:
    """`profile --json` / `import --json`: strict JSON (no NaN) with the run schema's version."""
    hot = ops.head(top).to_dict(orient="records")
    return json_text({"run_dir": str(run_dir), "run": meta, "hotspots": hot, "warnings": run_warnings(meta)},
                     SCHEMA_VERSION)


# ------------------------------------------------------------
# The step time and the profiler overhead as people read them, the same words in every command.

def interval_text(step: StepTime) -> str:
    """"[360.00 ms–372.00 ms, 94 % CI]", or "" when the step time has no interval."""
    if not step.has_interval():
        return ""
    conf = f", {100 * step.confidence:.0f} % CI" if step.confidence is not None else ""
    return f"[{fmt_time_s(step.low_s)}–{fmt_time_s(step.high_s)}{conf}]"


def step_value_text(step: StepTime | None) -> str:
    """"367.00 ms [360.00 ms–372.00 ms, 95 % CI]"; "–" without step times."""
    if step is None:
        return "–"
    interval = interval_text(step)
    return f"{fmt_time_s(step.value_s)} {interval}" if interval else fmt_time_s(step.value_s)


# Below this relative difference the synchronized step says nothing the step figure does not.
SYNC_DIFFERS_ABOVE = 0.05


def step_text(step: StepTime | None, sync: StepTime | None = None) -> str:
    """"step 367.00 ms [… CI], median of 5 windows of back-to-back steps": the figure and what it
    is; with `sync`, the synchronized step beside it where the two differ by more than 5 %."""
    if step is None:
        return "step –"
    text = f"step {step_value_text(step)}, {step.basis()}"
    if sync is not None and step.source == "back-to-back" and step.value_s > 0 \
            and abs(sync.value_s / step.value_s - 1) > SYNC_DIFFERS_ABOVE:
        text += f" (synchronized after every step: {fmt_time_s(sync.value_s)})"
    return text


def overhead_text(ratio: Ratio | None) -> str:
    """"1.08× [1.02–1.15]"; "–" when the run timed no unprofiled steps."""
    if ratio is None:
        return "–"
    return fmt_ratio(ratio.value, ratio.low, ratio.high)


def overhead_figure_text(meta: Mapping[str, Any]) -> str:
    """"1.08× [1.02–1.15] (kernels timed with CUDA activity only; the shapes pass 2.10× [...])",
    or "–" when the run has no overhead."""
    basis = overhead_basis_text(meta)
    return overhead_text(overhead_of(meta)) + (f" ({basis})" if basis else "")


def overhead_basis_text(meta: Mapping[str, Any]) -> str:
    """What the overhead compares: "kernels timed with CUDA activity only; the shapes pass 2.10×",
    or "" for a run with one profiled pass."""
    timing = RunMeta.of(meta).kernel_timing
    if not isinstance(timing, Mapping) or timing.get("source") != PASS_KERNELS_ONLY:
        return ""
    shapes = Ratio.from_json(timing.get("shapes_pass_overhead"))
    tail = f"; the shapes pass {overhead_text(shapes)}" if shapes is not None else ""
    return f"kernels timed with CUDA activity only{tail}"


def kernel_timing_warning(meta: Mapping[str, Any]) -> str | None:
    """A timing pass whose kernels could not be matched to the shapes pass's: say why and what it costs."""
    timing = RunMeta.of(meta).kernel_timing
    if not isinstance(timing, Mapping) or not timing.get("reason"):
        return None
    return (f"kernel times come from the shapes pass, whose overhead is higher: {timing['reason']}; "
            "give the model the same work every step (fixed shapes, no data-dependent branches)")
