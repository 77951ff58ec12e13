"""The report's rough edges a new user meets first: a hotspot table that fits (or scrolls, never
clips), one card per leave-it rule instead of six identical ones, only the ceilings a CPU has,
and when / how noisily measured ceilings were taken."""
from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from kernel_advisor.analyze.ceilings import datasheet_ceilings
from kernel_advisor.collect.rundir import load_run
from kernel_advisor.render.html_report import render_report, write_report
from kernel_advisor.render.profile_render import ceilings_text, run_warnings, summary_line
from kernel_advisor.render.report_template import CSS
from headless_chromium import CHROMIUM, run_chromium
from run_factory import OpSpec, gpt_like_ops, h200_ceilings, recommendations_doc, write_run

AMDAHL = "https://en.wikipedia.org/wiki/Amdahl%27s_law"
CPU_DEVICE = {"type": "cpu", "name": "AMD EPYC 7R13", "capability": None, "sm_count": None, "l2_bytes": None,
              "total_memory_bytes": None, "driver": ""}
CALIBRATION = {"created": "2026-11-20T08:15:42Z", "spread_frac": 0.031, "device_name": "AMD EPYC 7R13",
               "driver": "", "cache_file": "/cache/ceilings/amd-epyc-7r13.json"}


class Cards(HTMLParser):
    """Each <article> of the recommendations: its class, data-rule and text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.cards, self._depth = [], 0

    def handle_starttag(self, tag, attrs):
        if tag == "article":
            a = dict(attrs)
            self.cards.append({"class": a.get("class", ""), "rule": a.get("data-rule"), "text": ""})
            self._depth += 1

    def handle_endtag(self, tag):
        if tag == "article":
            self._depth -= 1

    def handle_data(self, data):
        if self._depth:
            self.cards[-1]["text"] += data


def cards(document: str) -> list[dict]:
    parser = Cards()
    parser.feed(document)
    return parser.cards


def leave_it(row: int, name: str, share: float, rule: str = "leave-small-op") -> dict:
    return {"rank": 0, "rule_id": rule, "tier": "leave-it", "title": "Under 2 % of device time — leave it",
            "scope": "op", "subject": f"row:{row}", "label": name, "row_ids": [row],
            "message": f"{name} takes {share:.2f} % of device time. Even deleting it would save under 2 % "
                       "of the step (Amdahl).",
            "estimated_gain_per_step_s": 0.0, "estimated_gain_frac": 0.0, "row_gain_per_step_s": {},
            "gain_model": "none", "gain_basis": "no time saving claimed",
            "thresholds": [{"key": "share_pct", "expected": "< 2", "actual": share, "ok": True}],
            "evidence": {"share_pct": share, "time_per_step_s": share * 2e-5}, "kernel_id": None, "command": None,
            "references": [AMDAHL], "caveats": [], "source": "rules/leave_it.yaml:5", "action": "none",
            "action_reason": "nothing to apply, the evidence says the op is where it should be", "measured": None}


def many_small_ops() -> list[OpSpec]:
    ops = gpt_like_ops()
    for i in range(6):
        ops.append(OpSpec(f"aten::small_{i}", [[8, 64]], ["bfloat16"], 2, 0.01e-3, flops=1e3, bytes=1e4,
                          compute_path="fp32", verdict="latency-bound"))
    return ops


# ---------------------------------------------------------------- leave-it cards


@pytest.fixture(scope="module")
def leave_it_render(tmp_path_factory):
    doc = recommendations_doc()
    rows = range(6, 12)  # the six aten::small_i rows
    doc["recommendations"] = (doc["recommendations"][:1] + [leave_it(r, f"aten::small_{r - 6}", 0.25 + r / 100)
                                                            for r in rows]
                              + [dict(leave_it(3, "aten::add", 5.0, rule="leave-op-at-bandwidth"),
                                      references=["https://pytorch.org/docs/stable/generated/torch.compile.html"])]
                              + doc["recommendations"][1:])
    run = load_run(write_run(tmp_path_factory.mktemp("leave") / "run", many_small_ops(), recommendations=doc))
    return render_report(run)[0]


def test_leave_it_verdicts_of_one_rule_share_one_card(leave_it_render):
    found = cards(leave_it_render)
    grouped = [c for c in found if "leave-it-group" in c["class"]]
    assert len(grouped) == 1 and grouped[0]["rule"] == "leave-small-op"
    text = grouped[0]["text"]
    for i in range(6):  # each op by its rank in the hotspot table (7..12), not its row id
        assert f"aten::small_{i} (#{7 + i})" in text
    assert "6 ops, no gain claimed" in text and "the same verdict on 6 ops" in text
    assert text.count(AMDAHL) == 1
    assert leave_it_render.count(AMDAHL) == 1  # the citation once in the whole report, not six times
    assert text.count("Even deleting it would save") == 1  # the reasoning once, the ops as rows
    # 1 + 6 + 1 + 1 recommendations: the six share a card, the rest keep theirs, in rank order
    assert [c["rule"] or c["text"].split("rule ")[1].split()[0] for c in found] == \
        ["fuse-softmax", "leave-small-op", "leave-op-at-bandwidth", "tf32-matmul"]


def test_a_single_leave_it_verdict_keeps_its_own_card(leave_it_render):
    single = [c for c in cards(leave_it_render) if "aten::add takes" in c["text"]]
    assert len(single) == 1 and "leave-it-group" not in single[0]["class"]
    assert "leave-op-at-bandwidth" in single[0]["text"]
    assert "The leave-it verdicts of one rule share one card" in leave_it_render


def test_grouped_share_and_time_columns_sort_by_value(leave_it_render):
    table = leave_it_render.split('class="leave-it-ops"', 1)[1].split("</table>", 1)[0]
    shares = [float(v) for v in re.findall(r'<td class="num" data-sort="([^"]+)">[0-9.]+%</td>', table)]
    assert shares == pytest.approx([0.25 + r / 100 for r in range(6, 12)])
    assert ">0.31%<" in table  # under 1 %: two significant digits, not "0.3%"


def test_folding_counts_recommendations_not_cards(tmp_path):
    doc = recommendations_doc()
    singles = [dict(doc["recommendations"][1], rule_id=f"rule-{i}", title=f"Finding {i}") for i in range(11)]
    doc["recommendations"] = singles + [leave_it(6 + i, f"aten::small_{i}", 0.3) for i in range(4)]
    document = render_report(load_run(write_run(tmp_path / "run", many_small_ops(), recommendations=doc)))[0]
    # 11 single cards + 1 card of 4: the 10 shown, then 1 single and the group folded = 5 recommendations
    assert "5 more recommendation(s)" in document
    assert document.index("5 more recommendation(s)") < document.index("leave-it-group")


# ---------------------------------------------------------------- hotspot table width


def test_hotspot_table_scrolls_and_its_names_wrap():
    assert re.search(r"\.table-scroll \{[^}]*overflow-x:auto", CSS)
    assert re.search(r"td\.opname \{[^}]*overflow-wrap:anywhere", CSS)
    assert re.search(r"td\.region \{[^}]*overflow-wrap:anywhere", CSS)


def test_hotspot_cells_carry_the_wrapping_classes(tmp_path):
    document = render_report(load_run(write_run(tmp_path / "run", gpt_like_ops())))[0]
    table = document.split('id="hotspots"', 1)[1]
    assert '<div class="table-scroll"><table class="sortable" id="hotspot-table">' in table
    body = table.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    assert body.count('<td class="opname">') == 6 and body.count('class="mono region"') == 6
    assert 'class="nowrap"><span class="mono"' not in body  # the op name no longer refuses to wrap


PROBE = """<script>
var t = document.querySelector('#hotspot-table'), w = t.parentElement, out = [];
out.push('table ' + t.scrollWidth + ' wrapper ' + w.clientWidth);
t.querySelectorAll('td, th').forEach(function (c) {
  if (c.scrollWidth > c.clientWidth + 1) { out.push('clipped ' + c.textContent.slice(0, 40)); }
});
var pre = document.createElement('pre'); pre.id = 'probe'; pre.textContent = out.join('\\n');
document.body.appendChild(pre);
</script></body>"""


@pytest.mark.chromium
@pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH")
def test_long_names_fit_a_1400_px_window(tmp_path):
    names = ["aten::_scaled_dot_product_flash_attention_for_cpu", "triton_per_fused__softmax_add_mul_native_layer_0",
             "mylib::fused_rope_embedding_kernel_v2", "aten::convolution_backward"]
    verdicts = ["memory-bound", "under-occupied", "compute-bound", "latency-bound"]
    ops = [OpSpec(names[i % 4], [[128, 4096, 4096], [4096, 4096], [4096], [128, 16, 512, 512]], ["bfloat16"] * 4,
                  100, (i + 1) * 1e-3, region="transformer.layers.11.self_attention.core",
                  flops=1.2e9 * (i + 1), bytes=1.5e9, compute_path="bf16_tc", verdict=verdicts[i % 4],
                  kind=["op", "kernel", "composite"][i % 3]) for i in range(12)]
    report = write_report(load_run(write_run(tmp_path / "run", ops)), tmp_path / "report.html").path
    html = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", report.read_text(encoding="utf-8"))
    probe = tmp_path / "probe.html"
    probe.write_text(html.replace("</body>", PROBE), encoding="utf-8")
    done = run_chromium(tmp_path, "--window-size=1400,1200", "--dump-dom", probe.as_uri())
    lines = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, re.S).group(1).splitlines()
    table_px, wrapper_px = map(int, re.match(r"table (\d+) wrapper (\d+)", lines[0]).groups())
    assert table_px <= wrapper_px, f"the table is {table_px} px in a {wrapper_px} px column: its right edge is cut"
    assert lines[1:] == []  # no cell's text is cut inside its cell


# ---------------------------------------------------------------- ceilings of a CPU run


def cpu_run(tmp_path, ops=None, calibration=None):
    ceil = datasheet_ceilings("AMD EPYC 7R13", "cpu", cpu_threads=2).to_dict()
    if calibration is not None:
        ceil.update(source="measured+datasheet", calibration=calibration)
        ceil["origins"].update(bandwidth="measured", fp32="measured", fp64="measured")
    ops = ops or [OpSpec("aten::mm", [[64, 64], [64, 64]], ["float32"] * 2, 2, 1e-3, flops=5.2e5, bytes=4.9e4,
                         compute_path="fp32", verdict="compute-bound")]
    return load_run(write_run(tmp_path / "run", ops, ceilings=ceil, device=CPU_DEVICE,
                              args={"device": "cpu", "mode": "inference", "dtype": "keep", "warmup": 1,
                                    "steps": 2, "seed": 0}))


def ceiling_rows(document: str) -> list[str]:
    section = document.split('id="ceilings"', 1)[1].split("</section>", 1)[0]
    return re.findall(r"<tr><td>(?:<code>)?([^<]+)(?:</code>)?</td><td class=\"num\"", section)


def test_cpu_run_lists_only_the_ceilings_a_cpu_has(tmp_path):
    document = render_report(cpu_run(tmp_path))[0]
    assert ceiling_rows(document) == ["memory bandwidth", "fp64", "fp32"]
    assert "Not shown: tf32, fp16_tc, bf16_tc, fp8_tc — a cpu device has no unit for them" in document
    for path in ("fp8_tc", "bf16_tc", "fp16_tc", "tf32"):
        assert f"<code>{path}</code>" not in document.split('id="ceilings"', 1)[1].split("</section>", 1)[0]


def test_cpu_run_keeps_a_fallback_row_an_op_used(tmp_path):
    ops = [OpSpec("aten::mm", [[64, 64], [64, 64]], ["bfloat16"] * 2, 2, 1e-3, flops=5.2e5, bytes=2.5e4,
                  compute_path="bf16_tc", verdict="compute-bound")]
    document = render_report(cpu_run(tmp_path, ops))[0]
    assert ceiling_rows(document) == ["memory bandwidth", "fp64", "fp32", "bf16_tc"]
    assert "Not shown: tf32, fp16_tc, fp8_tc" in document


def test_gpu_run_still_lists_every_path(tmp_path):
    document = render_report(load_run(write_run(tmp_path / "run", gpt_like_ops(), ceilings=h200_ceilings())))[0]
    assert ceiling_rows(document) == ["memory bandwidth", "fp64", "fp32", "tf32", "fp16_tc", "bf16_tc", "fp8_tc"]
    assert "Not shown:" not in document


# ---------------------------------------------------------------- when and how noisily ceilings were measured


def test_measured_ceilings_say_when_and_how_noisy(tmp_path):
    run = cpu_run(tmp_path, calibration=CALIBRATION)
    assert ceilings_text(run.meta["ceilings"]) == "measured 2026-11-20 08:15 UTC, ±3 % (+datasheet)"
    assert "ceilings: measured 2026-11-20 08:15 UTC, ±3 % (+datasheet)" in summary_line(run.meta, run.path)
    document = render_report(run)[0]
    assert ("Ceilings: measured 2026-11-20 08:15 UTC, ±3 % (+datasheet) for AMD EPYC 7R13 "
            "(cache entry /cache/ceilings/amd-epyc-7r13.json)") in document
    assert not any("noisy" in w for w in run_warnings(run.meta))


def test_noisy_calibration_is_a_run_warning(tmp_path):
    run = cpu_run(tmp_path, calibration=dict(CALIBRATION, spread_frac=0.18))
    warnings = [w for w in run_warnings(run.meta) if "noisy" in w]
    assert len(warnings) == 1 and "±18 %" in warnings[0] and "advisor calibrate --force" in warnings[0]
    assert "warning: the measured ceilings are noisy (±18 %" in render_report(run)[0]


def test_calibration_from_before_spreads_were_recorded(tmp_path):
    run = cpu_run(tmp_path, calibration=dict(CALIBRATION, spread_frac=None))
    assert ceilings_text(run.meta["ceilings"]) == "measured 2026-11-20 08:15 UTC, spread not recorded (+datasheet)"


def test_datasheet_ceilings_stay_one_word(tmp_path):
    run = cpu_run(tmp_path)
    assert ceilings_text(run.meta["ceilings"]) == "datasheet"
    assert "ceilings: datasheet ·" in summary_line(run.meta, run.path)


@pytest.mark.parametrize("fixed_rows", [[6], [6, 7], [6, 7, 8, 9, 10]])
def test_an_op_a_fix_card_names_is_not_in_the_leave_it_card(tmp_path, fixed_rows):
    doc = recommendations_doc()
    fix = dict(doc["recommendations"][0], rule_id="compile-fuse-chain", title="Fuse the chain", tier="compile",
               row_ids=fixed_rows)
    doc["recommendations"] = [fix] + [leave_it(r, f"aten::small_{r - 6}", 0.25 + r / 100) for r in range(6, 12)]
    document = render_report(load_run(write_run(tmp_path / "run", many_small_ops(), recommendations=doc)))[0]
    found = cards(document)
    fix_text = next(c["text"] for c in found if "Fuse the chain" in c["text"])
    leave_texts = " ".join(c["text"] for c in found if "leave it" in c["text"])
    for r in range(6, 12):
        op = f"aten::small_{r - 6} (#"
        assert (op in fix_text) is (r in fixed_rows)
        assert (op in leave_texts) is (r not in fixed_rows)


def test_cards_number_ops_as_the_hotspot_table_does(leave_it_render):
    # The hotspot table's first cell is the rank; the card names the same op with the same number.
    ranks = dict(re.findall(r'<tr><td class="num"[^>]*>(\d+)</td><td[^>]*>(?:<[^>]+>)*(aten::small_\d)', leave_it_render))
    assert ranks, "no hotspot rows found"
    for rank, name in ranks.items():
        assert f"{name} (#{rank})" in leave_it_render
