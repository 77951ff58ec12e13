"""The roofline chart: what is plotted, the roofs, PNG/SVG output, and `advisor roofline`."""
import math
import struct
import sys
import xml.etree.ElementTree as ET

import pytest
from typer.testing import CliRunner

from kernel_advisor.collect.rundir import load_run
from kernel_advisor.errors import EnvironmentCapabilityError, UserInputError
from kernel_advisor.render.roofline_chart import (LABEL_GID_PREFIX, LABELLED_TOP, POINTS_GID_PREFIX, caption,
                                                  chart_format, draw_roofline, roofline_data, roofline_figure,
                                                  svg_for_html)
from run_factory import H200_BANDWIDTH_BYTES_PER_S, OpSpec, gpt_like_ops, write_run

SVG_NS = "{http://www.w3.org/2000/svg}"
EVIL = "<script>alert(1)</script>"


def _drawn(element) -> int:
    """Drawn shapes under `element`: <path> and <use>, not the templates inside <defs>."""
    return sum(0 if child.tag == f"{SVG_NS}defs" else
               (1 if child.tag in (f"{SVG_NS}path", f"{SVG_NS}use") else _drawn(child)) for child in element)


def svg_markers(svg: bytes) -> dict[str, int]:
    """Markers per hotspot group <g id="hotspots-<class>">."""
    root = ET.fromstring(svg)
    return {g.get("id")[len(POINTS_GID_PREFIX):]: _drawn(g) for g in root.iter(f"{SVG_NS}g")
            if g.get("id", "").startswith(POINTS_GID_PREFIX)}


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])  # IHDR width, height


@pytest.fixture
def gpt_run(tmp_path):
    return load_run(write_run(tmp_path / "run", gpt_like_ops()))


def test_points_roofs_and_skips_hand_worked(gpt_run):
    data = roofline_data(gpt_run.ops, gpt_run.meta)
    # 6 rows: copy_ has 0 FLOP and fused_rope is unmodelled, so 4 points.
    assert [p.name for p in data.points] == ["aten::linear", "aten::_softmax", "aten::layer_norm", "aten::add"]
    assert [p.rank for p in data.points] == [1, 2, 3, 4]
    linear = data.points[0]
    assert linear.intensity == pytest.approx(1370.0)  # 1.37e11 FLOP / 1.0e8 B
    assert linear.achieved_flops_per_s == pytest.approx(2.74e14)  # 1.37e11 FLOP / (2 ms / 4 calls)
    assert linear.time_per_step_s == pytest.approx(1e-3)  # 2 ms over 2 steps
    # Roofs only for the paths the points use: fp32 (softmax, layer_norm, add) and bf16_tc (linear).
    assert data.roofs == (("fp32", 67e12), ("bf16_tc", 989.5e12))
    assert data.bandwidth_bytes_per_s == H200_BANDWIDTH_BYTES_PER_S
    assert [(s.reason, s.ops, s.time_pct) for s in data.skipped] == [
        ("unmodelled", 1, pytest.approx(2.5)), ("with 0 FLOP, pure data movement", 1, pytest.approx(2.5))]
    assert data.unmodelled_ops == 1 and data.plotted_time_pct == pytest.approx(95.0)
    assert caption(data).startswith("4 op row(s) plotted (95.0% of device time). Not plotted: 1 unmodelled (2.5%)")


def test_svg_has_one_marker_per_point_by_class(gpt_run):
    chart = draw_roofline(roofline_data(gpt_run.ops, gpt_run.meta), "svg")
    assert chart.points == 4
    assert svg_markers(chart.data) == {"compute-bound": 1, "memory-bound": 2, "latency-bound": 1}
    assert svg_for_html(chart).startswith("<svg")


def test_svg_is_reproducible(gpt_run):
    data = roofline_data(gpt_run.ops, gpt_run.meta)
    assert draw_roofline(data, "svg").data == draw_roofline(data, "svg").data  # no date, fixed ids


def test_png_is_written_at_the_figure_size(gpt_run):
    chart = draw_roofline(roofline_data(gpt_run.ops, gpt_run.meta), "png")
    assert chart.points == 4 and len(chart.data) > 10_000
    assert png_size(chart.data) == (990, 616)  # 9.0 × 5.6 in at 110 dpi


@pytest.mark.parametrize("n_ops", [1, 7, 127])
@pytest.mark.parametrize("dtype,path", [("float32", "fp32"), ("bfloat16", "bf16_tc"), ("float16", "fp16_tc")])
def test_point_count_follows_modelled_ops(tmp_path, n_ops, dtype, path):
    ops = [OpSpec("aten::mm", [[1823, 781], [781, 7 + i]], [dtype, dtype], 1 + i % 3, 1e-5 * (i + 1),
                  flops=2.0 * 1823 * 781 * (7 + i), bytes=2.0 * (1823 * 781 + 781 * (7 + i) + 1823 * (7 + i)),
                  compute_path=path, verdict=("compute-bound", "memory-bound", "latency-bound")[i % 3])
           for i in range(n_ops)]
    ops.append(OpSpec("mylib::opaque", [[1]], [dtype], 1, 1e-6))  # never plotted
    run = load_run(write_run(tmp_path / "run", ops, steps=1))
    data = roofline_data(run.ops, run.meta)
    chart = draw_roofline(data, "svg")
    assert chart.points == len(data.points) == n_ops
    assert sum(svg_markers(chart.data).values()) == n_ops
    assert data.roofs == ((path, run.meta["ceilings"]["peak_flops_per_s"][path]),)
    assert data.unmodelled_ops == 1


def _dense_run(tmp_path, layout: str):
    """Points crowded together: (intensity FLOP/byte, achieved FLOP/s) per op, all fp32."""
    n = {"cluster": 40, "identical": 12, "diagonal": 60, "by-the-legend": 30, "long-names": 25}[layout]
    spots = {
        "cluster": [(10 * (1 + 0.02 * (i % 7)), 2e12 * (1 + 0.03 * (i % 5))) for i in range(n)],
        "identical": [(3.0, 1e12)] * n,
        "diagonal": [(1.0 * 1.02 ** i, 4e11 * 1.02 ** i) for i in range(n)],
        # high intensity, low FLOP/s: the lower right corner, where the legend sits
        "by-the-legend": [(2e3 * (1 + 0.01 * i), 5e10 * (1 + 0.01 * (i % 4))) for i in range(n)],
        "long-names": [(5.0 + 0.05 * i, 1e12) for i in range(n)],
    }[layout]
    ops = []
    for i, (intensity, achieved) in enumerate(spots):
        flops = intensity * 1e8
        name = f"aten::op_{i}" + ("_" + "w" * 40 if layout == "long-names" else "")
        ops.append(OpSpec(name, [[64, 64]], ["float32"], 1, flops / achieved * (1 + 0.01 * (n - i)), flops=flops,
                          bytes=1e8, compute_path="fp32", verdict=("memory-bound", "latency-bound")[i % 2]))
    return load_run(write_run(tmp_path / "run", ops, steps=1))


def _overlap(a, b) -> bool:
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


@pytest.mark.parametrize("layout", ["cluster", "identical", "diagonal", "by-the-legend", "long-names"])
def test_point_labels_never_overlap(tmp_path, layout):
    run = _dense_run(tmp_path, layout)
    data = roofline_data(run.ops, run.meta)
    chart = roofline_figure(data)
    fig = chart.figure
    ax = fig.axes[0]
    fig.draw_without_rendering()  # measured as drawn: the label texts' own extents, after a full draw
    renderer = fig.canvas.get_renderer()
    labels = [t for t in ax.texts if (t.get_gid() or "").startswith(LABEL_GID_PREFIX)]
    assert labels == list(chart.labels)
    assert 1 <= len(labels) <= LABELLED_TOP
    boxes = [t.get_window_extent(renderer) for t in labels]
    for i, a in enumerate(boxes):
        for j in range(i):
            assert not _overlap(a, boxes[j]), (labels[i].get_text(), labels[j].get_text(), a, boxes[j])
    frame, legend = ax.get_window_extent(renderer), ax.get_legend().get_window_extent(renderer)
    others = [t.get_window_extent(renderer) for t in ax.texts if t not in labels and t.get_text()]  # roof labels
    for text, box in zip(labels, boxes):
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
        assert not _overlap(box, legend) and not any(_overlap(box, o) for o in others), text.get_text()
    # Rank order wins: #1 always gets a label, and each label names its point by rank.
    ranks = [int(t.get_gid()[len(LABEL_GID_PREFIX):]) for t in labels]
    assert ranks[0] == 1 and ranks == sorted(ranks)
    assert all(t.get_text().split()[0] == f"#{r}" for t, r in zip(labels, ranks))
    # The saved SVG holds the same labels.
    svg = draw_roofline(data, "svg").data.decode()
    assert svg.count(f'id="{LABEL_GID_PREFIX}') == len(labels)


def test_few_points_keep_their_full_labels_beside_them(gpt_run):
    chart = roofline_figure(roofline_data(gpt_run.ops, gpt_run.meta))
    assert [t.get_text() for t in chart.labels] == ["#1 aten::linear", "#2 aten::_softmax", "#3 aten::layer_norm",
                                                    "#4 aten::add"]
    assert all(t.get_position()[1] == 0 for t in chart.labels)  # level with their points: first ring, a side


def test_bytes_only_kernels_are_counted_not_plotted(tmp_path):
    ops = [OpSpec("aten::mm", [[7, 7], [7, 7]], ["float32"] * 2, 1, 1e-5, flops=686.0, bytes=588.0,
                  compute_path="fp32", verdict="latency-bound"),
           OpSpec("triton_poi_fused_add_0", [], [], 1, 3e-5, flops=math.nan, bytes=1e6, compute_path="fp32",
                  verdict="memory-bound", kind="kernel")]
    run = load_run(write_run(tmp_path / "run", ops, steps=1))
    data = roofline_data(run.ops, run.meta)
    assert len(data.points) == 1
    assert [(s.reason, s.ops) for s in data.skipped] == [("with bytes but no FLOP count (e.g. Inductor kernels)", 1)]
    assert data.skipped[0].time_pct == pytest.approx(75.0)  # 3e-5 of 4e-5


def test_names_are_escaped_in_svg(tmp_path):
    ops = [OpSpec(EVIL, [[7]], ["float32"], 1, 1e-5, flops=7.0, bytes=56.0, compute_path="fp32",
                  verdict="latency-bound")]
    run = load_run(write_run(tmp_path / "run", ops, steps=1))
    svg = draw_roofline(roofline_data(run.ops, run.meta), "svg").data.decode()
    assert EVIL not in svg and "&lt;script&gt;alert(1)&lt;/script&gt;" in svg


def test_run_without_analysis_is_refused(tmp_path):
    run = load_run(write_run(tmp_path / "run", gpt_like_ops(), analyzed=False))
    with pytest.raises(UserInputError, match="no roofline analysis"):
        roofline_data(run.ops, run.meta)


def test_ceilings_fall_back_to_the_op_columns_and_fail_without_either(gpt_run):
    meta = {k: v for k, v in gpt_run.meta.items() if k != "ceilings"}
    data = roofline_data(gpt_run.ops, meta)
    assert data.roofs == (("fp32", 67e12), ("bf16_tc", 989.5e12))
    bare = gpt_run.ops.drop(columns=["peak_flops_per_s", "bandwidth_bytes_per_s"])
    with pytest.raises(UserInputError, match="no device ceilings"):
        roofline_data(bare, meta)


def test_missing_matplotlib_is_an_environment_error(gpt_run, monkeypatch):
    data = roofline_data(gpt_run.ops, gpt_run.meta)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib → ImportError
    with pytest.raises(EnvironmentCapabilityError) as info:
        draw_roofline(data, "png")
    assert "kernel_advisor[plot]" in info.value.fix


@pytest.mark.parametrize("suffix,ok", [(".png", "png"), (".SVG", "svg"), (".jpg", None), ("", None)])
def test_chart_format_from_suffix(suffix, ok):
    if ok:
        assert chart_format(suffix) == ok
    else:
        with pytest.raises(UserInputError, match="cannot write a roofline chart"):
            chart_format(suffix)


# ---------------------------------------------------------------- CLI


@pytest.fixture
def cli():
    from kernel_advisor.cli import app

    return lambda *args: CliRunner().invoke(app, [str(a) for a in args])


@pytest.mark.parametrize("name", ["chart.png", "chart.svg"])
def test_cli_roofline_writes_the_chart(tmp_path, cli, name):
    run_dir = write_run(tmp_path / "run", gpt_like_ops())
    result = cli("roofline", run_dir, "-o", tmp_path / name)
    assert result.exit_code == 0, result.output
    data = (tmp_path / name).read_bytes()
    assert data and "4 op row(s) plotted" in result.output
    if name.endswith(".svg"):
        assert sum(svg_markers(data).values()) == 4
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]  # written atomically


def test_cli_roofline_defaults_to_the_latest_run(advisor_home, cli):
    from kernel_advisor.collect.rundir import set_latest

    run_dir = write_run(advisor_home / "runs" / "gpt-1", gpt_like_ops())
    set_latest(run_dir)
    result = cli("roofline")
    assert result.exit_code == 0, result.output
    assert png_size((run_dir / "roofline.png").read_bytes()) == (990, 616)


def test_cli_roofline_errors(tmp_path, cli, monkeypatch):
    run_dir = write_run(tmp_path / "run", gpt_like_ops())
    bad_suffix = cli("roofline", run_dir, "-o", tmp_path / "chart.jpg")
    assert bad_suffix.exit_code == 1 and "name the output file .png or .svg" in bad_suffix.output
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    no_plot = cli("roofline", run_dir, "-o", tmp_path / "chart.png")
    assert no_plot.exit_code == 2 and "install kernel_advisor[plot]" in no_plot.output
    assert not (tmp_path / "chart.png").exists()
