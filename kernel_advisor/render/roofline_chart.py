"""The roofline chart: the device's roofs and every modelled hotspot, log-log, with matplotlib.

`roofline_data` (pure) picks what is drawn; `roofline_figure` draws it and places the point
labels so that none overlaps another; `draw_roofline` renders PNG or SVG bytes.
matplotlib is the optional extra `kernel_advisor[plot]` and is imported only when drawing.
Points are ops.csv rows: x = FLOP/byte, y = achieved FLOP/s, area ∝ device time, colour =
verdict. Unmodelled ops, and ops with 0 FLOP (copies, fills: no place on a log FLOP axis),
are counted for the caption, not drawn.
"""
from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_advisor.collect.rundir import write_bytes_atomic
from kernel_advisor.errors import EnvironmentCapabilityError, UserInputError
from kernel_advisor.render.units import fmt_pct, fmt_si, shorten
from kernel_advisor.records.run import RunMeta

VERDICT_COLOURS = {"compute-bound": "#2e7d32", "memory-bound": "#1565c0", "under-occupied": "#00838f",
                   "latency-bound": "#ef6c00", "sequential": "#6d4c41",
                   "host-bound": "#8e24aa", "unknown": "#757575"}
POINTS_GID_PREFIX = "hotspots-"  # SVG: <g id="hotspots-memory-bound"> holds one marker per point
LABELLED_TOP = 5
FORMATS = ("png", "svg")
_MIN_AREA_PT2, _MAX_AREA_PT2 = 25.0, 900.0
UNMODELLED = "unmodelled"


@dataclass(frozen=True)
class RooflinePoint:
    rank: int  # 1-based position by device time, as in the hotspot table
    name: str
    intensity: float  # FLOP/byte
    achieved_flops_per_s: float
    time_per_step_s: float
    verdict: str


@dataclass(frozen=True)
class SkippedOps:
    """Op rows left off the chart for one reason."""

    reason: str
    ops: int
    time_pct: float  # share of the run's device time


@dataclass(frozen=True)
class RooflineData:
    device_name: str
    ceilings_source: str
    bandwidth_bytes_per_s: float
    roofs: tuple[tuple[str, float], ...]  # (compute path, peak FLOP/s) for paths the points use
    points: tuple[RooflinePoint, ...]
    skipped: tuple[SkippedOps, ...]  # only reasons that apply, unmodelled first

    @property
    def unmodelled_ops(self) -> int:
        return sum(s.ops for s in self.skipped if s.reason == UNMODELLED)

    @property
    def plotted_time_pct(self) -> float:
        return 100.0 - sum(s.time_pct for s in self.skipped)


@dataclass(frozen=True)
class RenderedChart:
    data: bytes
    fmt: str
    points: int  # markers drawn


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() == "true"
    return bool(value) and value == value  # NaN (a blank CSV cell) is not "modelled"


def _require_analysis(ops: pd.DataFrame) -> None:
    needed = ("modelled", "flops_per_call", "bytes_per_call", "intensity", "achieved_flops_per_s", "verdict")
    missing = [c for c in needed if c not in ops.columns]
    if missing:
        raise UserInputError(f"the run has no roofline analysis (ops.csv lacks {', '.join(missing)})",
                             "profile again with this version of kernel_advisor")


def _ceiling_values(ops: pd.DataFrame, meta: RunMeta, paths: list[str]) -> tuple[float, dict[str, float]]:
    """Bandwidth and peak per path: run.json ceilings first, the ops' own columns as fallback."""
    ceilings = RunMeta.of(meta).ceilings
    peaks = dict(ceilings.get("peak_flops_per_s") or {})
    bandwidth = ceilings.get("bandwidth_bytes_per_s")
    for path in paths:
        if path not in peaks and "peak_flops_per_s" in ops:
            column = ops.loc[ops["compute_path"] == path, "peak_flops_per_s"].dropna()
            if not column.empty:
                peaks[path] = float(column.iloc[0])
    if bandwidth is None and "bandwidth_bytes_per_s" in ops and ops["bandwidth_bytes_per_s"].notna().any():
        bandwidth = float(ops["bandwidth_bytes_per_s"].dropna().iloc[0])
    if bandwidth is None or any(p not in peaks for p in paths):
        raise UserInputError("the run records no device ceilings (run.json has no \"ceilings\")",
                             "profile again, or run `advisor calibrate` first on this machine")
    return float(bandwidth), {p: float(peaks[p]) for p in paths}


def _skip_masks(ops: pd.DataFrame) -> dict[str, pd.Series]:
    """Why a row cannot be a point on log-log axes, by reason (each row in at most one)."""
    modelled = ops["modelled"].map(_truthy).astype(bool)
    timed = ops["device_time_total_s"] > 0
    flops, nbytes = ops["flops_per_call"], ops["bytes_per_call"]
    return {
        UNMODELLED: ~modelled,
        "with 0 FLOP, pure data movement": modelled & (flops == 0),
        "with bytes but no FLOP count (e.g. Inductor kernels)": modelled & flops.isna(),
        "with no bytes moved or no device time": modelled & (flops > 0) & ~((nbytes > 0) & timed),
    }


def roofline_data(ops: pd.DataFrame, meta: RunMeta) -> RooflineData:
    """What the chart shows for a loaded run; raises UserInputError when it was not analyzed."""
    _require_analysis(ops)
    ordered = ops.sort_values("device_time_total_s", ascending=False, kind="stable").reset_index(drop=True)
    total_s = float(ordered["device_time_total_s"].sum()) or 1.0
    meta = RunMeta.of(meta)
    steps = meta.step_count
    masks = _skip_masks(ordered)
    drawable = ~pd.concat(masks.values(), axis=1).any(axis=1)
    points = tuple(RooflinePoint(rank=i + 1, name=str(r.name), intensity=float(r.intensity),
                                 achieved_flops_per_s=float(r.achieved_flops_per_s),
                                 time_per_step_s=float(r.device_time_total_s) / steps,
                                 verdict=str(r.verdict) if r.verdict in VERDICT_COLOURS else "unknown")
                   for i, r in zip(ordered.index[drawable], ordered[drawable].itertuples(index=False)))
    paths = sorted({str(p) for p in ordered.loc[drawable, "compute_path"] if p})
    bandwidth, peaks = _ceiling_values(ordered, meta, paths)
    skipped = tuple(SkippedOps(reason, int(mask.sum()),
                               100 * float(ordered.loc[mask, "device_time_total_s"].sum()) / total_s)
                    for reason, mask in masks.items() if mask.any())
    ceilings = meta.ceilings
    return RooflineData(
        device_name=str(ceilings.get("device_name") or meta.device_name or "device"),
        ceilings_source=str(ceilings.get("source") or "unknown"), bandwidth_bytes_per_s=bandwidth,
        roofs=tuple(sorted(peaks.items(), key=lambda kv: kv[1])), points=points, skipped=skipped)


def caption(data: RooflineData) -> str:
    text = f"{len(data.points)} op row(s) plotted ({fmt_pct(data.plotted_time_pct)} of device time)."
    if data.skipped:
        text += " Not plotted: " + "; ".join(f"{s.ops} {s.reason} ({fmt_pct(s.time_pct)})"
                                             for s in data.skipped) + "."
    return text + (f" Point area ∝ device time; the top {LABELLED_TOP} by time carry their rank (#)"
                   " where a label fits without overlapping another.")


def _import_matplotlib():
    try:
        import matplotlib
        from matplotlib.figure import Figure
    except ImportError:
        raise EnvironmentCapabilityError("matplotlib is not installed, so no roofline chart can be drawn",
                                         "install kernel_advisor[plot] (pip install 'kernel_advisor[plot]')"
                                         ) from None
    return matplotlib, Figure


def chart_format(suffix: str) -> str:
    fmt = suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise UserInputError(f"cannot write a roofline chart as '{suffix or '(no suffix)'}'",
                             "name the output file .png or .svg")
    return fmt


# svg.fonttype none: text stays text (small, searchable); hashsalt + no date: same bytes every time.
_RC = {"svg.fonttype": "none", "svg.hashsalt": "kernel_advisor", "font.size": 9}


@dataclass(frozen=True)
class ChartFigure:
    """The drawn figure, its layout fixed: what draw_roofline saves, and what tests measure."""

    figure: Any  # matplotlib.figure.Figure, with an Agg canvas
    points: int  # markers drawn
    labels: tuple[Any, ...]  # the point labels placed (matplotlib Text), by rank


def roofline_figure(data: RooflineData) -> ChartFigure:
    """The chart as a matplotlib Figure (no pyplot, no global backend change).

    The constrained layout runs once, before the point labels are placed, and is then fixed:
    the labels are placed in display coordinates (_place_labels), which a later layout pass
    would move.
    """
    matplotlib, Figure = _import_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(9.0, 5.6), dpi=110, layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        x_lo, x_hi, y_lo, y_hi = _limits(data)
        _draw_roofs(ax, data, x_lo, x_hi)
        drawn = _draw_points(ax, data)
        _style_axes(ax, data, (x_lo, x_hi), (y_lo, y_hi))
        fig.draw_without_rendering()
        fig.set_layout_engine("none")
        labels = _place_labels(ax, data)
    return ChartFigure(figure=fig, points=drawn, labels=labels)


def draw_roofline(data: RooflineData, fmt: str) -> RenderedChart:
    """PNG or SVG bytes of the chart (Agg for PNG; no pyplot, no global backend change)."""
    matplotlib, _ = _import_matplotlib()
    fmt = chart_format(fmt)
    chart = roofline_figure(data)
    with matplotlib.rc_context(_RC):
        buffer = io.BytesIO()
        metadata = {"Date": None} if fmt == "svg" else {}
        chart.figure.savefig(buffer, format=fmt, metadata=metadata)
    return RenderedChart(data=buffer.getvalue(), fmt=fmt, points=chart.points)


def _limits(data: RooflineData) -> tuple[float, float, float, float]:
    ridges = [peak / data.bandwidth_bytes_per_s for _, peak in data.roofs] or [1.0]
    xs = [p.intensity for p in data.points] + ridges
    ys = [p.achieved_flops_per_s for p in data.points] + [peak for _, peak in data.roofs]
    x_lo, x_hi = min(xs) / 4, max(xs) * 8
    top = max(ys) if ys else data.bandwidth_bytes_per_s * x_hi
    bottom = min(ys + [data.bandwidth_bytes_per_s * x_lo])
    return x_lo, x_hi, bottom / 4, top * 3


def _draw_roofs(ax, data: RooflineData, x_lo: float, x_hi: float) -> None:
    bw = data.bandwidth_bytes_per_s
    top_ridge = max((peak / bw for _, peak in data.roofs), default=x_hi)
    ax.plot([x_lo, top_ridge], [bw * x_lo, bw * top_ridge], color="#424242", lw=1.6)
    x_mid = (x_lo * top_ridge) ** 0.5  # halfway along the slope on a log axis
    ax.annotate(f"memory {fmt_si(bw, 'B/s')}", (x_mid, bw * x_mid), xytext=(-8, 6),
                textcoords="offset points", ha="right", color="#424242")
    for path, peak in data.roofs:
        ax.plot([peak / bw, x_hi], [peak, peak], color="#424242", lw=1.6)
        ax.annotate(f"{path} {fmt_si(peak, 'FLOP/s')}", (x_hi, peak), xytext=(-4, 4),
                    textcoords="offset points", ha="right", color="#424242")


def _area_pt2(point: RooflinePoint, biggest_s: float) -> float:
    return _MIN_AREA_PT2 + (_MAX_AREA_PT2 - _MIN_AREA_PT2) * point.time_per_step_s / biggest_s


def _draw_points(ax, data: RooflineData) -> int:
    biggest_s = max((p.time_per_step_s for p in data.points), default=1.0) or 1.0
    drawn = 0
    for verdict, colour in VERDICT_COLOURS.items():
        group = [p for p in data.points if p.verdict == verdict]
        if not group:
            continue
        areas = [_area_pt2(p, biggest_s) for p in group]
        markers = ax.scatter([p.intensity for p in group], [p.achieved_flops_per_s for p in group], s=areas,
                             color=colour, alpha=0.7, edgecolors="black", linewidths=0.5,
                             label=f"{verdict} ({len(group)})", zorder=3)
        markers.set_gid(POINTS_GID_PREFIX + verdict)
        drawn += len(group)
    return drawn


# Point labels: the top LABELLED_TOP points by time, each "#rank name", placed greedily in rank
# order at the first free spot among candidates around its point: 8 directions on rings ever
# further out (beyond the first ring a leader line joins label and point). A spot is free when
# the label's box, grown by LABEL_GAP_PX, stays inside the axes and meets no label placed
# before it, no roof label and not the legend; among free spots the one covering the fewest
# markers wins, then the nearer ring, then the direction order. A label with no free spot is
# tried as "#rank" alone (the hotspot table names the op), and dropped when that fits nowhere
# either: labels never overlap. Deterministic: the same chart places them the same way.
LABEL_GID_PREFIX = "hotspot-label-"  # <g id="hotspot-label-<rank>"> in the SVG
LABEL_GAP_PX = 2.0
_LABEL_RINGS_PT = (3.0, 14.0, 26.0, 40.0)  # gap between marker edge and label, ring by ring
# (dx, dy) toward the label, and the text's anchor on that side: right, left, above, below, diagonals
_LABEL_DIRECTIONS = ((1, 0, "left", "center"), (-1, 0, "right", "center"), (0, 1, "center", "bottom"),
                     (0, -1, "center", "top"), (1, 1, "left", "bottom"), (1, -1, "left", "top"),
                     (-1, 1, "right", "bottom"), (-1, -1, "right", "top"))
_DIAGONAL = 0.7071


def _grown(box, pad: float):
    from matplotlib.transforms import Bbox

    return Bbox.from_extents(box.x0 - pad, box.y0 - pad, box.x1 + pad, box.y1 + pad)


def _box_meets_circle(box, cx: float, cy: float, r: float) -> bool:
    nearest_x, nearest_y = min(max(cx, box.x0), box.x1), min(max(cy, box.y0), box.y1)
    return (nearest_x - cx) ** 2 + (nearest_y - cy) ** 2 < r * r


def _place_labels(ax, data: RooflineData) -> tuple[Any, ...]:
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    px_per_pt = fig.dpi / 72.0
    frame = ax.get_window_extent(renderer)
    blocked = [t.get_window_extent(renderer) for t in ax.texts]  # the roof labels
    legend = ax.get_legend()
    if legend is not None:
        blocked.append(legend.get_window_extent(renderer))
    biggest_s = max((p.time_per_step_s for p in data.points), default=1.0) or 1.0
    markers = [(*ax.transData.transform((p.intensity, p.achieved_flops_per_s)),
                _area_pt2(p, biggest_s) ** 0.5 / 2 * px_per_pt) for p in data.points]
    placed = []
    for p in sorted(data.points, key=lambda p: p.rank)[:LABELLED_TOP]:
        xy = (p.intensity, p.achieved_flops_per_s)
        radius_pt = _area_pt2(p, biggest_s) ** 0.5 / 2  # scatter sizes are areas in points²
        text = ax.annotate("", xy, xytext=(0, 0), textcoords="offset points", fontsize=8, zorder=4)
        text.set_gid(f"{LABEL_GID_PREFIX}{p.rank}")
        spot = None
        for words in (f"#{p.rank} {shorten(p.name, 28)}", f"#{p.rank}"):
            text.set_text(words)
            spot = _free_spot(text, renderer, radius_pt, frame, blocked, markers)
            if spot is not None:
                break
        if spot is None:
            text.remove()
            continue
        ring, offset, ha, va, box = spot
        text.set(position=offset, ha=ha, va=va)
        blocked.append(_grown(box, LABEL_GAP_PX))
        placed.append(text)
        if ring > 0:  # detached from its point: a leader line from the label to the marker's edge
            ax.annotate("", xy, xytext=offset, textcoords="offset points", zorder=4,
                        arrowprops={"arrowstyle": "-", "color": "#616161", "lw": 0.6, "shrinkA": 0,
                                    "shrinkB": radius_pt})
    return tuple(placed)


def _free_spot(text, renderer, radius_pt: float, frame, blocked: list, markers: list):
    """(ring, offset in points, ha, va, box) of the best free spot for `text`, or None."""
    best, best_key = None, None
    for ring, gap_pt in enumerate(_LABEL_RINGS_PT):
        for order, (dx, dy, ha, va) in enumerate(_LABEL_DIRECTIONS):
            scale = _DIAGONAL if dx and dy else 1.0
            offset = ((radius_pt + gap_pt) * dx * scale, (radius_pt + gap_pt) * dy * scale)
            text.set(position=offset, ha=ha, va=va)
            box = text.get_window_extent(renderer)
            grown = _grown(box, LABEL_GAP_PX)
            if not (frame.x0 <= grown.x0 and grown.x1 <= frame.x1 and frame.y0 <= grown.y0 and grown.y1 <= frame.y1):
                continue
            if any(grown.overlaps(b) for b in blocked):
                continue
            key = (sum(_box_meets_circle(box, *m) for m in markers), ring, order)
            if best_key is None or key < best_key:
                best, best_key = (ring, offset, ha, va, box), key
        if best_key is not None and best_key[0] == 0:
            break  # a spot covering no marker on this ring: a further ring can only be worse
    return best


def _style_axes(ax, data: RooflineData, xlim: tuple[float, float], ylim: tuple[float, float]) -> None:
    from matplotlib.ticker import EngFormatter

    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(*xlim)
    ax.set_ylim(*ylim)
    ax.yaxis.set_major_formatter(EngFormatter(unit="FLOP/s"))
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("achieved FLOP/s")
    ax.set_title(f"Roofline — {data.device_name} ({data.ceilings_source} ceilings)")
    ax.grid(True, which="major", color="#e0e0e0", lw=0.6)
    if data.points:
        legend = ax.legend(loc="lower right", title="class (points)")
        for handle in legend.legend_handles:  # one marker size in the key: size means time on the chart
            handle.set_sizes([60.0])


def write_chart(chart: RenderedChart, path: Path) -> None:
    """Atomically: a viewer never sees half a file."""
    write_bytes_atomic(Path(path), chart.data)


def svg_for_html(chart: RenderedChart) -> str:
    """The SVG element alone (no XML prolog or DOCTYPE), to inline in an HTML page."""
    text = chart.data.decode("utf-8")
    start = text.find("<svg")
    if chart.fmt != "svg" or start < 0:
        raise ValueError("svg_for_html needs an SVG chart")
    return text[start:]
