"""`advisor recommend` and `advisor rules` through the CLI, on a run directory written here."""
from __future__ import annotations

import json
import textwrap

import pytest
from test_recommend_support import USER_RULE, fp32_run, write_run_dir
from typer.testing import CliRunner

from kernel_advisor.records.recommendations import load_recommendations
from kernel_advisor.cli import app

runner = CliRunner()


@pytest.fixture()
def run_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ADVISOR_HOME", str(tmp_path / ".advisor"))
    return write_run_dir(tmp_path / ".advisor" / "runs" / "model-20260101-000000", *fp32_run())


def invoke(*args):
    return runner.invoke(app, list(map(str, args)))


def test_json_output_and_recommendations_file(run_dir):
    result = invoke("recommend", run_dir, "--format", "json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert json.loads((run_dir / "recommendations.json").read_text()) == doc
    ids = [f["rule_id"] for f in doc["findings"]]
    assert ids[:2] == ["lib-bf16-autocast", "lib-tf32-matmul"] and ids[-1] == "leave-small-op"
    first = doc["recommendations"][0]
    # 3.75 ms of a 6 ms step (hand-worked in test_recommend_engine.py)
    assert first["estimated_gain_per_step_s"] == pytest.approx(3.75e-3)
    assert first["estimated_gain_frac"] == pytest.approx(0.625)
    assert first["row_ids"] == [0] and first["evidence"]["efficiency_frac"] == pytest.approx(0.2)
    assert {t["key"] for t in first["thresholds"]} >= {"ops", "dtypes", "verdict", "share_pct"}
    assert doc["hotspots"][0]["chosen"] == {"tier": "library", "rule_id": "lib-bf16-autocast",
                                            "why": "Autocast compute-bound fp32 matmuls to bf16: saves 3.75 ms"}


def test_recommendations_file_reads_back_through_the_report_reader(run_dir):
    assert invoke("recommend", run_dir, "--format", "json").exit_code == 0
    recs = load_recommendations(run_dir)
    top = recs[0]
    assert (top.rule_id, top.tier, top.row_ids) == ("lib-bf16-autocast", "library", (0,))
    assert top.estimated_gain_per_step_s == pytest.approx(3.75e-3) and top.action == "bf16_autocast"
    assert top.measured is None  # filled only by --measure


def test_default_run_is_latest_and_table_is_the_default(run_dir):
    (run_dir.parent / "latest").write_text(run_dir.name + "\n")
    result = invoke("recommend")
    assert result.exit_code == 0, result.output
    assert "lib-bf16-autocast" in result.stdout and "Hotspots" in result.stdout
    assert (run_dir / "recommendations.json").is_file()


def test_markdown(run_dir):
    result = invoke("recommend", run_dir, "--format", "markdown")
    assert result.exit_code == 0
    assert "| 1 | 3.750 | 62.5 | library |" in result.stdout


def test_no_run_yet(tmp_path, monkeypatch):
    monkeypatch.setenv("ADVISOR_HOME", str(tmp_path / "empty"))
    result = invoke("recommend")
    assert result.exit_code == 1 and "no run yet" in result.stderr


@pytest.mark.parametrize("limit, code", [(90, 0), (50, 5)])
def test_fail_if_gain_above(run_dir, limit, code):
    # the estimated total is 78.93 % of the step (the bundled softmax claims nothing on row 1: its
    # measured routes say it loses to eager at that shape, so compile's saving is the row's)
    result = invoke("recommend", run_dir, "--format", "json", "--fail-if-gain-above", limit)
    assert result.exit_code == code
    assert json.loads(result.stdout)["findings"]  # the report is printed before the gate trips
    if code == 5:
        assert result.stderr.startswith("advisor: error: the estimated gain is 78.9 % of the step")


def test_extra_rules_are_applied(run_dir, tmp_path):
    extra = tmp_path / "team.yaml"
    extra.write_text(USER_RULE)
    result = invoke("recommend", run_dir, "--format", "json", "--rules", extra)
    assert result.exit_code == 0, result.output
    found = {f["rule_id"]: f for f in json.loads(result.stdout)["findings"]}
    assert found["team-softmax-budget"]["estimated_gain_per_step_s"] == pytest.approx(0.25e-3)


def test_bad_rules_file_exits_1_with_file_and_line(run_dir, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(USER_RULE.replace("share_pct: {min: 10}", "share_pct: {min: ten}"))
    result = invoke("recommend", run_dir, "--rules", bad)
    assert result.exit_code == 1
    assert f"{bad}:6: 'share_pct': min and max must be numbers" in result.stderr


def test_bad_format_is_a_usage_error(run_dir):
    assert invoke("recommend", run_dir, "--format", "html").exit_code == 1


def test_rules_list_shows_builtin_and_extra(tmp_path):
    extra = tmp_path / "team.yaml"
    extra.write_text(USER_RULE)
    result = runner.invoke(app, ["rules", "list", "--rules", str(extra)], terminal_width=200)
    assert result.exit_code == 0
    assert "lib-sdpa" in result.stdout and "team-softmax-budget" in result.stdout and "team.yaml:3" in result.stdout


def test_rules_validate_ok_and_error(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(USER_RULE)
    result = invoke("rules", "validate", good)
    assert result.exit_code == 0 and result.stdout == "ok: 1 rules\n"
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent(USER_RULE).replace("version: 1\n", ""))
    result = invoke("rules", "validate", bad)
    assert result.exit_code == 1 and f"{bad}:1: missing 'version'" in result.stderr


def test_check_compile_ranks_graph_break_fixes(tmp_path, monkeypatch):
    model = tmp_path / "model.py"
    model.write_text(textwrap.dedent("""\
        import torch
        import torch.nn as nn


        class Model(nn.Module):
            def forward(self, x):
                y = x * 2
                if y.sum().item() > 0:
                    y = y + 1
                return y.relu()


        def get_inputs():
            return [torch.ones(4, 8)]
        """))
    monkeypatch.setenv("ADVISOR_HOME", str(tmp_path / ".advisor"))
    ops, seq, meta = fp32_run()
    meta["model"]["file"] = str(model)
    run_dir = write_run_dir(tmp_path / "run", ops, seq, meta)
    result = invoke("recommend", run_dir, "--format", "json", "--check-compile")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["compile_check"]["graph_break_count"] == 1
    assert doc["compile_check"]["breaks"][0]["frames"] == ["model.py:8 in forward"]
    ids = [f["rule_id"] for f in doc["findings"]]
    tiers = [f["tier"] for f in doc["findings"]]
    # the blocker goes right before the first compile finding
    at = ids.index("compile-fix-graph-breaks")
    assert tiers.index("compile") == at and tiers[at + 1] == "compile"
    assert {"compile-memory-bound-op", "compile-gemm-autotune"} <= set(ids[at + 1:])


def test_check_compile_needs_the_model_file(run_dir):
    result = invoke("recommend", run_dir, "--check-compile")
    assert result.exit_code == 1 and "--check-compile needs the model file" in result.stderr
