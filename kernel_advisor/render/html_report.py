"""`advisor report`: one self-contained HTML file for a run.

Summary, device and ceilings, the roofline chart (inline SVG), a sortable hotspot table,
regions, recommendations with their evidence and try-kernel results. Opens offline; every
string from the model or the trace is escaped (render/report_template.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernel_advisor import __version__
from kernel_advisor.collect.options import check_count, check_output_file
from kernel_advisor.collect.rundir import LoadedRun, write_text_atomic
from kernel_advisor.errors import EnvironmentCapabilityError, UserInputError
from kernel_advisor.records.recommendations import load_recommendations
from kernel_advisor.records.run import RunMeta
from kernel_advisor.records.try_kernel import load_try_kernel
from kernel_advisor.render.report_extras import recommendations_section, try_kernel_section
from kernel_advisor.render.report_sections import (ceilings_section, hotspot_section, ordered_ops, regions_section,
                                                   summary_section)
from kernel_advisor.render.report_template import Html, h, join, page
from kernel_advisor.render.roofline_chart import caption, draw_roofline, roofline_data, svg_for_html

SECTIONS = (("summary", "Summary"), ("ceilings", "Device and ceilings"), ("roofline", "Roofline"),
            ("hotspots", "Hotspots"), ("regions", "Regions"), ("recommendations", "Recommendations"),
            ("try-kernel", "Try-kernel"))
DEFAULT_TOP = 50
DATA_HOTSPOT_COLUMNS = ("row_id", "name", "kind", "region", "input_shapes", "input_dtypes", "calls",
                        "device_time_total_s", "share_pct", "flops_per_call", "bytes_per_call", "intensity",
                        "compute_path", "achieved_flops_per_s", "achieved_bytes_per_s", "efficiency_frac",
                        "headroom_total_s", "verdict")


@dataclass(frozen=True)
class ReportResult:
    path: Path
    chart_points: int | None  # None: the chart could not be drawn (see chart_problem)
    chart_problem: str | None
    recommendations: int | None  # None: no recommendations.json
    try_kernel_variants: int | None  # None: no try_kernel.json


@dataclass(frozen=True)
class _Chart:
    html: Html
    points: int | None
    problem: str | None


def roofline_section(run: LoadedRun) -> _Chart:
    title = h("h2", "Roofline")
    try:
        data = roofline_data(run.ops, run.meta)
        chart = draw_roofline(data, "svg")
    except (EnvironmentCapabilityError, UserInputError) as e:
        note = h("p", f"Chart unavailable: {e.one_line()}. The tables below are complete without it.",
                 class_="note")
        return _Chart(h("section", title, note, id="roofline"), None, e.problem)
    # Markup as is: matplotlib XML-escapes every text it writes (test_names_are_escaped_in_svg).
    figure = h("figure", h("div", Html(svg_for_html(chart)), class_="chart"),
               h("figcaption", caption(data), class_="note"), style="margin:0")
    return _Chart(h("section", title, figure, id="roofline"), chart.points, None)


def _report_data(run: LoadedRun, top: int) -> dict:
    hot = ordered_ops(run.ops).head(top)
    columns = [c for c in DATA_HOTSPOT_COLUMNS if c in hot.columns]
    return {"kernel_advisor": __version__, "run_dir": str(run.path), "run": run.meta,
            "hotspots": hot[columns].to_dict(orient="records")}


def render_report(run: LoadedRun, top: int = DEFAULT_TOP) -> tuple[str, ReportResult]:
    """(the HTML document, what went into it); `path` in the result is the run directory."""
    check_count("--top", top, 1, "pass --top 1 or more")
    recs, tries = load_recommendations(run.path), load_try_kernel(run.path)
    chart = roofline_section(run)
    meta = RunMeta.of(run.meta)
    model = meta.model_file or run.path.name
    device = meta.device_name or "unknown device"
    created = meta.created if "created" in meta else "–"
    header = h("header", h("h1", f"kernel_advisor report — {Path(str(model)).name} on {device}"),
               h("p", f"run {run.path} · created {created}"), class_="top")
    nav = h("nav", [h("a", label, href=f"#{anchor}") for anchor, label in SECTIONS])
    body = join([summary_section(meta, run.ops), ceilings_section(meta, run.ops), chart.html,
                 hotspot_section(run.ops, meta, top), regions_section(run.ops, meta),
                 recommendations_section(recs, run.ops, meta), try_kernel_section(tries)])
    footer = h("footer", f"kernel_advisor {__version__}. Trace: {run.path / 'trace.json.gz'} (opens in "
                         "Perfetto). Times are device time per profiled step unless marked.")
    document = page(f"kernel_advisor — {Path(str(model)).name}", header, nav, body, footer,
                    _report_data(run, top))
    result = ReportResult(path=run.path, chart_points=chart.points, chart_problem=chart.problem,
                          recommendations=None if recs is None else len(recs),
                          try_kernel_variants=None if tries is None else len(tries.variants))
    return document, result


def write_report(run: LoadedRun, out: Path, top: int = DEFAULT_TOP) -> ReportResult:
    """Render and write atomically (a browser never sees half a report)."""
    out = Path(out)
    check_output_file(out, (".html", ".htm"), force=True)  # a directory, a run's record or a device is refused
    document, result = render_report(run, top)
    write_text_atomic(out, document)
    return ReportResult(out, result.chart_points, result.chart_problem, result.recommendations,
                        result.try_kernel_variants)
