"""`advisor report`: one self-contained HTML file, parsed back and checked section by section."""
import json
import re
import sys
from html.parser import HTMLParser

import pytest
from typer.testing import CliRunner

from kernel_advisor.collect.rundir import load_run, set_latest
from kernel_advisor.errors import UserInputError
from kernel_advisor.render.html_report import SECTIONS, render_report, write_report
from kernel_advisor.render.report_template import SORT_JS, h, json_for_script, script_csp_hash
from run_factory import OpSpec, gpt_like_ops, recommendations_doc, try_kernel_doc, write_run

EVIL = "<script>alert(1)</script>"
EVIL_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
MS = 1e-3


class ReportParser(HTMLParser):
    """Sections, scripts, tables (rows of (text, data-sort) cells) and external references."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.sections, self.scripts, self.tables, self.external = [], [], {}, []
        self._script, self._table, self._cell, self._row = None, None, None, None
        self.csp = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        for key in ("src", "href"):
            if a.get(key) and not a[key].startswith("#"):
                self.external.append(a[key])
        if tag == "meta" and a.get("http-equiv") == "Content-Security-Policy":
            self.csp = a["content"]
        if tag == "section":
            self.sections.append(a.get("id"))
        elif tag == "script":
            self._script = {"attrs": a, "text": ""}
        elif tag == "table" and a.get("id"):
            self._table = self.tables.setdefault(a["id"], [])
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = [a.get("data-sort"), ""]

    def handle_endtag(self, tag):
        if tag == "script" and self._script is not None:
            self.scripts.append(self._script)
            self._script = None
        elif tag in ("td", "th") and self._cell is not None:
            self._row.append((self._cell[1].strip(), self._cell[0]))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self._table.append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._script is not None:
            self._script["text"] += data
        elif self._cell is not None:
            self._cell[1] += data


def parse(document: str) -> ReportParser:
    parser = ReportParser()
    parser.feed(document)
    parser.close()
    return parser


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """Op and region named like an attack, with recommendations and try-kernel results."""
    ops = gpt_like_ops(region_name=EVIL, op_name=EVIL)
    return load_run(write_run(tmp_path_factory.mktemp("report") / "run", ops,
                              recommendations=recommendations_doc(), try_kernel=try_kernel_doc()))


@pytest.fixture(scope="module")
def full_render(full_run):
    """(document, result) of the default render, shared: rendering draws the chart (~0.5 s)."""
    return render_report(full_run)


def test_every_section_is_there(full_render):
    document, result = full_render
    page = parse(document)
    assert page.sections == [anchor for anchor, _ in SECTIONS] == [
        "summary", "ceilings", "roofline", "hotspots", "regions", "recommendations", "try-kernel"]
    assert result.chart_points == 4 and result.chart_problem is None
    assert (result.recommendations, result.try_kernel_variants) == (2, 3)
    assert {"hotspot-table", "region-table", "try-kernel-table"} <= set(page.tables)
    assert "<svg" in document and "4 op row(s) plotted" in document


def test_model_strings_are_escaped_everywhere(full_render):
    document, _ = full_render
    assert EVIL not in document
    assert EVIL_ESCAPED in document  # tables, SVG labels
    assert "&lt;b&gt;not bold&lt;/b&gt;" in document  # recommendation message
    page = parse(document)
    assert len(page.scripts) == 2  # the data block and the sort script: nothing injected
    data = json.loads(page.scripts[0]["text"])
    assert page.scripts[0]["attrs"] == {"type": "application/json", "id": "advisor-data"}
    assert EVIL in {row["name"] for row in data["hotspots"]}  # JSON.parse gives the name back unchanged
    region_names = [row[0][0] for row in page.tables["region-table"][1:]]
    assert EVIL in region_names  # the parser decodes the entities: the user sees the name as text


def test_no_network_needed(full_render):
    document, _ = full_render
    page = parse(document)
    assert page.external == []  # no src/href outside the page
    assert "default-src 'none'" in page.csp
    assert script_csp_hash(SORT_JS) in page.csp and page.scripts[1]["text"] == SORT_JS


def test_hotspot_table_values_sort_keys_and_order(full_run):
    page = parse(render_report(full_run, top=5)[0])
    header, *rows = page.tables["hotspot-table"]
    assert [c[0] for c in header][:8] == ["#", "op", "region", "shapes", "dtype", "calls/step", "time/step", "share"]
    assert len(rows) == 5  # --top 5 of 6
    linear = rows[0]
    assert linear[1][0] == "aten::linear" and linear[4][0] == "bfloat16"
    assert linear[3][0] == "8×512×4096, 4096×4096, 4096"
    assert float(linear[5][1]) == 2.0  # 4 calls / 2 steps
    assert float(linear[6][1]) == pytest.approx(1.0 * MS) and linear[6][0] == "1.00 ms"  # 2 ms / 2 steps
    assert float(linear[7][1]) == pytest.approx(50.0)  # 2.0 of 4.0 ms
    assert float(linear[8][1]) == pytest.approx(1.37e11)
    assert linear[10] == ("1,370", repr(1370.0))  # FLOP/byte: 1.37e11 / 1.0e8
    assert rows[1][10][0] == "1.25"  # softmax: 1.68e8 / 1.34e8
    assert float(linear[13][1]) == pytest.approx((1.37e11 / 989.5e12) / 0.5e-3)  # roofline / mean time
    # above roofline per step: (2 ms - 4 × 1.37e11/989.5e12 s) / 2 steps = 723.1 µs
    assert float(linear[14][1]) == pytest.approx((2e-3 - 4 * 1.37e11 / 989.5e12) / 2)
    times = [float(r[6][1]) for r in rows]
    assert times == sorted(times, reverse=True)


def test_unmodelled_cells_sort_as_blank(full_render):
    page = parse(full_render[0])
    evil = [r for r in page.tables["hotspot-table"][1:] if r[1][0] == EVIL][0]
    assert evil[8] == ("–", "") and evil[15][0] == "unknown"  # FLOP/call blank, class unknown


def test_regions_hand_worked(full_render):
    page = parse(full_render[0])
    rows = {r[0][0]: r for r in page.tables["region-table"][1:]}
    # EVIL region: linear 2.0 + softmax 1.2 + rope 0.1 ms over 2 steps = 1.65 ms; mlp: (0.4 + 0.2) / 2.
    assert float(rows[EVIL][1][1]) == pytest.approx(1.65 * MS) and float(rows[EVIL][2][1]) == pytest.approx(82.5)
    assert float(rows["mlp"][1][1]) == pytest.approx(0.3 * MS) and rows["mlp"][3][0] == "2"
    assert float(rows["(outside any region)"][1][1]) == pytest.approx(0.05 * MS)  # copy_ 0.1 ms / 2
    assert rows["mlp"][4][0] == "aten::layer_norm 200.0 µs · aten::add 100.0 µs"


def test_summary_split_by_class(full_render):
    document = full_render[0]
    # compute: linear 1.0 ms; memory: softmax 0.6 + layer_norm 0.2 + copy_ 0.05; latency: add 0.1; unknown: 0.05
    for text in ("compute-bound 1.00 ms/step (50.0%)", "memory-bound 850.0 µs/step (42.5%)",
                 "latency-bound 100.0 µs/step (5.0%)", "unknown 50.0 µs/step (2.5%)"):
        assert text in document


def test_recommendations_and_try_kernel_content(full_render):
    document = full_render[0]
    assert "est. gain 400.0 µs/step, 17.4% of the step" in document
    assert "aten::_softmax (#2)" in document and "advisor try-kernel --kernel triton-softmax" in document
    # predicted beside measured (recommend --measure): 17.4 % estimated, 1.21× [1.18–1.24] measured
    assert "measured 1.21× [1.18–1.24] (faster, 17.4% of the step)" in document
    assert "measured: not-applied — TF32 is already on" in document
    page = parse(document)
    header, eager, triton, cuda = page.tables["try-kernel-table"]
    assert [c[0] for c in header][:4] == ["variant", "status", "step time", "speedup"]
    assert triton[2][0] == "1.90 ms [1.85 ms–1.95 ms]" and float(triton[3][1]) == pytest.approx(1.21)
    assert cuda[1][0].startswith("FAILED") and "nvcc was not found" in cuda[1][0]


def test_runs_without_extras_say_how_to_get_them(tmp_path):
    run = load_run(write_run(tmp_path / "run", gpt_like_ops()))
    document, result = render_report(run)
    assert result.recommendations is None and result.try_kernel_variants is None
    assert "run `advisor recommend` on it" in document and "No try_kernel.json in this run" in document


def test_run_without_regions(tmp_path):
    ops = [OpSpec("aten::mm", [[1823, 781], [781, 127]], ["float32"] * 2, 1, 1e-3, flops=2.0 * 1823 * 781 * 127,
                  bytes=4.0 * (1823 * 781 + 781 * 127 + 1823 * 127), compute_path="fp32", verdict="compute-bound")]
    document, _ = render_report(load_run(write_run(tmp_path / "run", ops, steps=1)))
    assert "No op ran inside a record_function or NVTX range" in document


def test_chart_unavailable_without_matplotlib(full_run, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    document, result = render_report(full_run)
    assert result.chart_points is None and "matplotlib" in result.chart_problem
    assert "Chart unavailable" in document and "kernel_advisor[plot]" in document and "<svg" not in document
    assert "hotspots" in parse(document).sections


def test_chart_unavailable_without_analysis(tmp_path):
    document, result = render_report(load_run(write_run(tmp_path / "run", gpt_like_ops(), analyzed=False)))
    assert result.chart_points is None and "no roofline analysis" in result.chart_problem
    assert "Chart unavailable" in document


def test_json_for_script_cannot_close_the_script():
    text = json_for_script({"name": "</script><!-- & \u2028", "x": float("nan")})
    assert "</" not in text and "<!--" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"name": "</script><!-- & \u2028", "x": None}


def test_builder_escapes_text_and_attributes():
    assert h("td", "a<b", class_="num", data_sort=3) == '<td class="num" data-sort="3">a&lt;b</td>'
    assert h("span", title='" onmouseover="x') == '<span title="&quot; onmouseover=&quot;x"></span>'


def test_write_is_atomic_and_checks_the_target(full_run, tmp_path):
    out = tmp_path / "r.html"
    result = write_report(full_run, out)
    assert result.path == out and out.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name]
    with pytest.raises(UserInputError, match="is a directory"):
        write_report(full_run, tmp_path)
    with pytest.raises(UserInputError, match="does not exist"):
        write_report(full_run, tmp_path / "nope" / "r.html")
    with pytest.raises(UserInputError, match="--top"):
        write_report(full_run, out, top=0)


def test_corrupt_recommendations_file_is_a_user_error(tmp_path):
    run_dir = write_run(tmp_path / "run", gpt_like_ops())
    (run_dir / "recommendations.json").write_text("{not json")
    with pytest.raises(UserInputError, match="not valid JSON"):
        render_report(load_run(run_dir))


# ---------------------------------------------------------------- CLI


@pytest.fixture
def cli():
    from kernel_advisor.cli import app

    return lambda *args: CliRunner().invoke(app, [str(a) for a in args])


def test_cli_report_to_a_file(full_run, tmp_path, cli):
    out = tmp_path / "report.html"
    result = cli("report", full_run.path, "-o", out, "--top", "3")
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output
    assert len(parse(out.read_text(encoding="utf-8")).tables["hotspot-table"]) == 1 + 3


def test_cli_report_defaults_to_latest_run_dir(advisor_home, cli):
    run_dir = write_run(advisor_home / "runs" / "gpt-1", gpt_like_ops())
    set_latest(run_dir)
    result = cli("report")
    assert result.exit_code == 0, result.output
    assert (run_dir / "report.html").is_file()


def test_cli_report_warns_when_the_chart_is_missing(full_run, tmp_path, cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    result = cli("report", full_run.path, "-o", tmp_path / "r.html")
    assert result.exit_code == 0
    assert "advisor: warning: the report has no roofline chart" in result.output
    assert (tmp_path / "r.html").is_file()


def test_cli_report_bad_run_exits_1(tmp_path, cli):
    result = cli("report", tmp_path / "missing")
    assert result.exit_code == 1 and re.search(r"advisor: error: run directory .* does not exist", result.output)


def test_long_recommendation_lists_fold_after_the_first_ten(tmp_path):
    from kernel_advisor.render.report_extras import CARDS_SHOWN

    doc = recommendations_doc()
    doc["recommendations"] = [dict(doc["recommendations"][1], rule_id=f"rule-{i}", title=f"Finding {i}")
                              for i in range(13)]
    document, result = render_report(load_run(write_run(tmp_path / "run", gpt_like_ops(), recommendations=doc)))
    assert result.recommendations == 13 and CARDS_SHOWN == 10
    assert "3 more recommendation(s)" in document
    assert document.index("Finding 9") < document.index("3 more recommendation(s)") < document.index("Finding 10")


@pytest.mark.parametrize("shapes,text", [
    ([[1823, 781], [781], []], "1823×781, 781"),  # the [] of a non-tensor argument is left out
    ([[[2, 7], [2, 7]], []], "[2×7, 2×7]"),  # a TensorList (aten::cat)
    ([[1]], "1"),
])
def test_shapes_text(shapes, text):
    from kernel_advisor.render.report_sections import shapes_text

    assert shapes_text(shapes) == text
