"""The report's sections, one function each, from a loaded run to escaped Html.

Values arrive in SI units and are scaled here (render/units.py); numeric cells carry the SI
value in `data-sort` so the table sorts by value, not by text.
"""
from __future__ import annotations

import json
import math
from typing import Any, Mapping

import pandas as pd

from kernel_advisor.analyze.roofline import VERDICTS
from kernel_advisor.collect.step_time import step_time_of
from kernel_advisor.render.profile_render import ceilings_text, run_warnings
from kernel_advisor.render.report_template import Html, h, join
from kernel_advisor.render.profile_render import overhead_figure_text, step_value_text
from kernel_advisor.render.units import fmt_frac_pct, fmt_pct, fmt_si, fmt_time_s, shorten
from kernel_advisor.records.run import RunMeta

_VERDICT_VARS = {"compute-bound": "--compute", "memory-bound": "--memory", "under-occupied": "--occupancy",
                 "latency-bound": "--latency", "sequential": "--sequential", "host-bound": "--host",
                 "unknown": "--unknown"}


def missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def num_cell(value: Any, text: str) -> Html:
    sort = "" if missing(value) else repr(float(value))
    return h("td", text, class_="num", data_sort=sort)


def fmt_field(key: str, value: Any) -> str:
    """A stored value as people read it; the unit comes from the key's suffix."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (int, float)):
        for suffix, fmt in (("_frac", lambda v: fmt_frac_pct(v, 1)), ("_pct", fmt_pct),
                            ("_bytes_per_s", lambda v: fmt_si(v, "B/s")),
                            ("_flops_per_s", lambda v: fmt_si(v, "FLOP/s")), ("_s", fmt_time_s),
                            ("_bytes", lambda v: fmt_si(v, "B")), ("_flops", lambda v: fmt_si(v, "FLOP"))):
            if key.endswith(suffix):
                return fmt(value)
        return f"{value:.4g}" if isinstance(value, float) else str(value)
    if isinstance(value, (list, dict)):
        return shorten(json.dumps(value, default=str), 240)
    return str(value)


def kv_table(items: Mapping[str, Any]) -> Html:
    rows = [h("tr", h("td", key), h("td", fmt_field(key, value), class_="wrap")) for key, value in items.items()]
    return h("table", h("tbody", rows), class_="kv")


def verdict_badge(verdict: str, compute_path: str = "") -> Html:
    verdict = verdict if verdict in VERDICTS else "unknown"
    title = f"compute path: {compute_path}" if compute_path else None
    return h("span", verdict, class_=f"badge v-{verdict}", title=title)


def _shape_text(shape: list) -> str:
    if all(isinstance(d, int) for d in shape):
        return "×".join(map(str, shape))
    return "[" + ", ".join(_shape_text(s) if isinstance(s, list) else str(s) for s in shape) + "]"  # TensorList


def shapes_text(shapes: Any) -> str:
    """`[[8, 512], [512], []]` → "8×512, 512" (non-tensor arguments, recorded as [], are left out)."""
    dims = [s for s in shapes if isinstance(s, list) and s] if isinstance(shapes, list) else []
    return ", ".join(_shape_text(d) for d in dims)


def dtype_text(dtypes: Any) -> str:
    """The first tensor dtype: `["bfloat16", "scalar", ""]` → "bfloat16"."""
    if not isinstance(dtypes, list):
        return ""
    return next((d for d in dtypes if isinstance(d, str) and d not in ("", "scalar")), "")


def _steps(meta: Mapping[str, Any]) -> int:
    return RunMeta.of(meta).step_count


# ---------------------------------------------------------------- summary


def _figure(label: str, value: str) -> Html:
    return h("div", h("div", value, class_="value"), h("div", label, class_="label"), class_="figure")


def time_by_verdict(ops: pd.DataFrame, steps: int) -> dict[str, float]:
    """Device time per step per verdict (all "unknown" for a run without analysis)."""
    verdicts = ops["verdict"] if "verdict" in ops else pd.Series(["unknown"] * len(ops), index=ops.index)
    per_step = ops["device_time_total_s"].groupby(verdicts.where(verdicts.isin(VERDICTS), "unknown")).sum() / steps
    return {v: float(per_step.get(v, 0.0)) for v in VERDICTS if per_step.get(v, 0.0) > 0}


def _class_bar(split: dict[str, float]) -> Html:
    total = sum(split.values()) or 1.0
    segments = [h("span", style=f"width:{100 * t / total:.3f}%;background:var({_VERDICT_VARS[v]})",
                  title=f"{v}: {fmt_time_s(t)}/step") for v, t in split.items()]
    legend = [h("span", h("span", class_="swatch", style=f"background:var({_VERDICT_VARS[v]})"),
                f"{v} {fmt_time_s(t)}/step ({fmt_pct(100 * t / total)})") for v, t in split.items()]
    return join([h("div", segments, class_="classbar"), h("div", legend, class_="legend")])


def summary_section(meta: Mapping[str, Any], ops: pd.DataFrame) -> Html:
    meta = RunMeta.of(meta)
    steps, step = meta.step_count, step_time_of(meta)
    # NB: an op faster than its roofline (L2 reuse, a cost model that overcounts) has negative
    # headroom; it frees no time for the others, so only positive headroom is summed.
    headroom = (ops["headroom_total_s"].where(ops["headroom_total_s"] > 0).sum() / steps
                if "headroom_total_s" in ops else None)
    figures = [
        _figure(f"step time ({step.basis() if step else 'no step times'})", step_value_text(step)),
        _figure("device time per step", fmt_time_s(float(ops["device_time_total_s"].sum()) / steps)),
        _figure("device busy", fmt_frac_pct(meta.device_busy_frac)),
        _figure("device time modelled", fmt_pct(meta.coverage.get("modelled_time_pct"))),
        _figure("time above roofline per step", fmt_time_s(headroom)),
        _figure("peak memory", fmt_si(meta.peak_memory_bytes, "B")),
        _figure("profiler overhead (profiled / unprofiled median)", overhead_figure_text(meta)),
    ]
    args = meta.args
    details = {"model file": meta.model_file, "source": meta.source, "created": meta.created,
               "mode": args.get("mode"), "dtype": args.get("dtype"), "steps (warmup)":
               f"{meta.steps} ({args.get('warmup', '–')})", **meta.versions}
    settings = meta.settings
    warnings = [h("p", f"warning: {line}", class_="note") for line in run_warnings(meta)]
    return h("section", h("h2", "Summary"), h("div", figures, class_="figures"), warnings,
             h("h3", "Device time per step by class", style="margin-top:16px"),
             _class_bar(time_by_verdict(ops, steps)),
             h("div", h("div", h("h3", "Run"), kv_table(details)),
               h("div", h("h3", "Numerics settings"), kv_table(settings)),
               style="display:flex;gap:48px;flex-wrap:wrap;margin-top:12px"), id="summary")


# ---------------------------------------------------------------- device and ceilings


def _path_usage(ops: pd.DataFrame, steps: int) -> dict[str, float]:
    if "compute_path" not in ops:
        return {}
    used = ops[ops["compute_path"].astype(str) != ""]
    return (used["device_time_total_s"].groupby(used["compute_path"]).sum() / steps).to_dict()


def ceilings_section(meta: Mapping[str, Any], ops: pd.DataFrame) -> Html:
    device, ceil = RunMeta.of(meta).device, RunMeta.of(meta).ceilings
    cap = device.get("capability")
    device_rows = {"name": device.get("name"), "type": device.get("type"),
                   "compute capability": ".".join(map(str, cap)) if cap else None,
                   "SMs": device.get("sm_count"), "L2": fmt_si(device.get("l2_bytes"), "B"),
                   "memory": fmt_si(device.get("total_memory_bytes"), "B"), "driver": device.get("driver")}
    if not ceil:
        body = h("p", "This run records no ceilings, so nothing was placed on a roofline.", class_="note")
        return h("section", h("h2", "Device and ceilings"), kv_table(device_rows), body, id="ceilings")
    origins, native = ceil.get("origins") or {}, ceil.get("native_paths") or []
    usage = _path_usage(ops, _steps(meta))
    rows = [h("tr", h("td", "memory bandwidth"), num_cell(ceil.get("bandwidth_bytes_per_s"),
                                                       fmt_si(ceil.get("bandwidth_bytes_per_s"), "B/s")),
              h("td", origins.get("bandwidth", "")), h("td", ""), h("td", ""))]
    peaks = dict(ceil.get("peak_flops_per_s") or {})
    hidden = [p for p in peaks if not applies_to_device(p, device.get("type"), native, usage)]
    for path, peak in peaks.items():
        if path in hidden:
            continue
        note = "" if not native or path in native else "no unit for it: falls back"
        rows.append(h("tr", h("td", h("code", path)), num_cell(peak, fmt_si(peak, "FLOP/s")),
                      h("td", origins.get(path, "falls back" if note else "")),
                      num_cell(usage.get(path), fmt_time_s(usage.get(path)) if path in usage else ""),
                      h("td", note, class_="note")))
    table = h("table", h("thead", h("tr", h("th", "ceiling"), h("th", "value", class_="num"), h("th", "origin"),
                                     h("th", "ops' time/step on it", class_="num"), h("th", ""))),
              h("tbody", rows))
    omitted = (h("p", f"Not shown: {', '.join(hidden)} — a {device.get('type')} device has no unit for "
                      "them and no op of this run used them.", class_="note ceilings-omitted")
               if hidden else None)
    calibration = ceil.get("calibration") if isinstance(ceil.get("calibration"), Mapping) else {}
    entry = f" (cache entry {calibration['cache_file']})" if calibration.get("cache_file") else ""
    source = h("p", f"Ceilings: {ceilings_text(ceil)} for {ceil.get('device_name', '')}{entry}. "
                    "Measured values come from `advisor calibrate` (± is half the range of its repetitions "
                    "around their median); datasheet values overstate what kernels can reach, so headroom "
                    "against them is an upper bound.", class_="note ceilings-source")
    return h("section", h("h2", "Device and ceilings"), h("div", h("div", kv_table(device_rows)), h("div", table),
                                                          style="display:flex;gap:48px;flex-wrap:wrap"),
             omitted, source, id="ceilings")


def applies_to_device(path: str, device_type: Any, native: list, usage: Mapping[str, float]) -> bool:
    """A CPU has no tensor cores: its fp8/fp16/bf16 tensor-core and TF32 rows only repeat the fp32
    peak they fall back to, so they are shown only when an op of the run was placed on them."""
    return device_type != "cpu" or not native or path in native or path in usage


# ---------------------------------------------------------------- hotspots

HOTSPOT_HEADERS = (("#", True), ("op", False), ("region", False), ("shapes", False), ("dtype", False),
                   ("calls/step", True), ("time/step", True), ("share", True), ("FLOP/call", True),
                   ("bytes/call", True), ("FLOP/byte", True), ("achieved FLOP/s", True),
                   ("achieved B/s", True), ("of roofline", True), ("above roofline/step", True),
                   ("class", False))


def _get(row: Mapping[str, Any], key: str) -> Any:
    value = row.get(key)
    return None if missing(value) else value


def intensity_text(flop_per_byte: float | None) -> str:
    if flop_per_byte is None:
        return "–"
    return f"{flop_per_byte:,.0f}" if flop_per_byte >= 100 else f"{flop_per_byte:.3g}"  # 1,370 not 1.37e+03


def _hotspot_row(rank: int, row: Mapping[str, Any], steps: int) -> Html:
    name, kind = str(row.get("name", "")), str(row.get("kind") or "op")
    headroom = _get(row, "headroom_total_s")
    flops, nbytes = _get(row, "flops_per_call"), _get(row, "bytes_per_call")
    cells = [
        num_cell(rank, str(rank)),
        h("td", h("span", shorten(name, 36), class_="mono", title=name),
          h("span", f" {kind}", class_="note") if kind != "op" else None, class_="opname"),
        h("td", shorten(str(row.get("region") or ""), 20), class_="mono region", title=row.get("region") or None),
        h("td", shorten(shapes_text(row.get("input_shapes")), 80), class_="mono shapes"),
        h("td", dtype_text(row.get("input_dtypes"))),
        num_cell(row.get("calls", 0) / steps, f"{row.get('calls', 0) / steps:g}"),
        num_cell(row.get("device_time_total_s", 0.0) / steps, fmt_time_s(row.get("device_time_total_s", 0.0) / steps)),
        num_cell(row.get("share_pct"), fmt_pct(row.get("share_pct"))),
        num_cell(flops, fmt_si(flops, "")), num_cell(nbytes, fmt_si(nbytes, "B")),
        num_cell(_get(row, "intensity"), intensity_text(_get(row, "intensity"))),
        num_cell(_get(row, "achieved_flops_per_s"), fmt_si(_get(row, "achieved_flops_per_s"), "FLOP/s")),
        num_cell(_get(row, "achieved_bytes_per_s"), fmt_si(_get(row, "achieved_bytes_per_s"), "B/s")),
        num_cell(_get(row, "efficiency_frac"), fmt_frac_pct(_get(row, "efficiency_frac"))),
        num_cell(headroom / steps if headroom is not None else None,
                 fmt_time_s(headroom / steps if headroom is not None else None)),
        h("td", verdict_badge(str(row.get("verdict") or "unknown"), row.get("compute_path") or ""),
          class_="nowrap"),
    ]
    return h("tr", cells)


def ordered_ops(ops: pd.DataFrame) -> pd.DataFrame:
    return ops.sort_values("device_time_total_s", ascending=False, kind="stable").reset_index(drop=True)


def hotspot_section(ops: pd.DataFrame, meta: Mapping[str, Any], top: int) -> Html:
    steps, ordered = _steps(meta), ordered_ops(ops)
    shown = ordered.head(top)
    head = h("tr", [h("th", label, class_="num" if numeric else None) for label, numeric in HOTSPOT_HEADERS])
    rows = [_hotspot_row(i + 1, row, steps) for i, row in enumerate(shown.to_dict(orient="records"))]
    note = (f"Showing the top {len(shown)} of {len(ordered)} op rows by device time "
            f"({fmt_pct(float(shown['share_pct'].sum()) if len(shown) else 0.0)} of device time). "
            "Click a column header to sort; # is the rank by time, as on the roofline chart.")
    table = h("div", h("table", h("thead", head), h("tbody", rows), class_="sortable", id="hotspot-table"),
              class_="table-scroll")
    return h("section", h("h2", "Hotspots"), h("p", note, class_="note"), table, id="hotspots")


# ---------------------------------------------------------------- regions


def region_frame(ops: pd.DataFrame, steps: int, top_ops: int = 3) -> pd.DataFrame:
    """Per record_function/NVTX region: time per step, share, op rows, its top ops by time."""
    regions = ops["region"].fillna("").astype(str) if "region" in ops else pd.Series([""] * len(ops))
    total_s = float(ops["device_time_total_s"].sum()) or 1.0
    rows = []
    for region, group in ops.groupby(regions.values, sort=False):
        top = group.sort_values("device_time_total_s", ascending=False, kind="stable").head(top_ops)
        rows.append({"region": region, "time_per_step_s": float(group["device_time_total_s"].sum()) / steps,
                     "share_pct": 100 * float(group["device_time_total_s"].sum()) / total_s, "ops": len(group),
                     "top_ops": [(str(n), float(t) / steps) for n, t in zip(top["name"], top["device_time_total_s"])]})
    frame = pd.DataFrame(rows, columns=["region", "time_per_step_s", "share_pct", "ops", "top_ops"])
    return frame.sort_values("time_per_step_s", ascending=False, kind="stable").reset_index(drop=True)


def regions_section(ops: pd.DataFrame, meta: Mapping[str, Any]) -> Html:
    table = region_frame(ops, _steps(meta))
    if table.empty or (len(table) == 1 and table.loc[0, "region"] == ""):
        body = h("p", "No op ran inside a record_function or NVTX range. Wrap parts of the model in "
                      "torch.profiler.record_function(\"name\") to see time per part here.", class_="note")
        return h("section", h("h2", "Regions"), body, id="regions")
    head = h("tr", h("th", "region"), h("th", "time/step", class_="num"), h("th", "share", class_="num"),
             h("th", "op rows", class_="num"), h("th", "top ops"))
    rows = [h("tr", h("td", r.region or "(outside any region)", class_="mono"),
              num_cell(r.time_per_step_s, fmt_time_s(r.time_per_step_s)),
              num_cell(r.share_pct, fmt_pct(r.share_pct)), num_cell(r.ops, str(r.ops)),
              h("td", join([h("span", h("span", shorten(n, 40), class_="mono"), f" {fmt_time_s(t)}")
                            for n, t in r.top_ops], sep=" · ")))
            for r in table.itertuples(index=False)]
    note = h("p", "The innermost user region each op ran in; time of nested regions is not added to "
                  "their parents.", class_="note")
    return h("section", h("h2", "Regions"), note,
             h("table", h("thead", head), h("tbody", rows), class_="sortable", id="region-table"), id="regions")
