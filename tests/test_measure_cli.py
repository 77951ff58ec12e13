"""`advisor recommend --measure` end to end on CPU: a Llama-like block with naive attention and
a hand-written RMSNorm is profiled, then every recommendation's action is applied and timed."""
from __future__ import annotations

import json
import os
import shutil

import pytest
from typer.testing import CliRunner

from kernel_advisor.cli import app

# One profile and a 30 s search shared by the module: about 40 s on 2 cores, so with the slow tests.
pytestmark = pytest.mark.slow
runner = CliRunner()
MODEL = os.path.join(os.path.dirname(__file__), "data", "llama_naive.py")
STATUSES = {"passed", "failed-gate", "not-applied", "not-measurable", "error"}


def invoke(*args):
    return runner.invoke(app, list(map(str, args)))


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One profile and one measurement shared by the tests below (compiling takes seconds)."""
    tmp = tmp_path_factory.mktemp("measure")
    model = tmp / "llama_naive.py"
    shutil.copy(MODEL, model)
    run = tmp / "run"
    result = invoke("profile", model, "--device", "cpu", "--steps", "2", "--warmup", "1", "--out", run)
    assert result.exit_code == 0, result.output
    # a budget keeps the search to seconds on 2 cores; the plan is written as code too
    result = invoke("recommend", run, "--measure", "--budget-s", "30", "--emit-plan", tmp / "plan.py",
                    "--format", "json")
    assert result.exit_code == 0, result.output
    return run, json.loads(result.stdout)


def _by_action(doc, action):
    return [r for r in doc["recommendations"] if r["action"] == action]


@pytest.mark.parametrize("action", ["sdpa", "compile"])
def test_sdpa_and_compile_are_measured_with_intervals(measured, action):
    _, doc = measured
    recs = _by_action(doc, action)
    assert recs, [r["rule_id"] for r in doc["recommendations"]]
    for rec in recs:
        m = rec["measured"]
        if action == "compile" and m["status"] == "not-measurable":
            # a cold compile on a loaded 2-core machine can outlast the budget: then it must say so
            assert "--budget-s" in m["reason"], m
            continue
        assert m["status"] == "passed", m
        speed = m["speedup"]
        assert speed["low"] <= speed["value"] <= speed["high"]
        assert m["verdict"] in ("faster", "slower", "no measurable difference")
        assert m["gain_frac"] == pytest.approx(1 - m["step_s"]["value"] / doc["measurement"]["eager_step_s"]["value"],
                                               abs=1e-9)


def test_every_recommendation_has_a_status_and_a_reason_when_not_passed(measured):
    _, doc = measured
    for rec in doc["recommendations"]:
        m = rec["measured"]
        assert m["status"] in STATUSES
        assert m["status"] == "passed" or m["reason"], rec["rule_id"]


def test_plan_is_measured(measured):
    _, doc = measured
    plan = doc["plan"]
    assert plan["measured"]["status"] in STATUSES
    if len(plan["actions"]) >= 2:  # a combination of its own, gated and timed against eager
        assert plan["measured"]["status"] == "passed" and plan["measured"]["speedup"] is not None
    if plan["actions"]:  # the fastest configuration the search found, measured faster than eager
        assert plan["measured"]["verdict"] == "faster"
        assert " + ".join(plan["actions"]) in {a["action"] for a in doc["actions"]}


def test_ranked_by_measured_gain(measured):
    _, doc = measured
    recs = doc["recommendations"]
    assert [r["rank"] for r in recs] == sorted(r["rank"] for r in recs)
    faster = [r["measured"]["gain_frac"] for r in recs if r["measured"]["verdict"] == "faster"]
    assert faster == sorted(faster, reverse=True)
    n = len(faster)
    assert all(r["measured"]["verdict"] == "faster" for r in recs[:n])


def test_recommendations_json_holds_the_measurement(measured):
    run, doc = measured
    saved = json.loads((run / "recommendations.json").read_text())
    assert saved == doc and saved["schema_version"] == 3


def test_json_is_strict(measured):
    run, _ = measured
    json.loads((run / "recommendations.json").read_text(), parse_constant=lambda c: pytest.fail(c))


@pytest.mark.parametrize("args,fragment", [
    (["--also", "compile"], "only apply with --measure"),
    (["--measure", "--also", "fp4"], "--also fp4: not an action"),
    (["--measure", "--region", "x*"], "not to a --region"),
])
def test_bad_measure_options_are_one_line_exit_1(measured, args, fragment):
    run, _ = measured
    result = invoke("recommend", run, *args)
    assert result.exit_code == 1
    assert fragment in result.output and "Traceback" not in result.output


def test_model_file_gone_is_exit_1(measured, tmp_path):
    run, _ = measured
    moved = tmp_path / "run"
    shutil.copytree(run, moved)
    meta = json.loads((moved / "run.json").read_text())
    meta["model"]["file"] = str(tmp_path / "gone.py")
    (moved / "run.json").write_text(json.dumps(meta))
    result = invoke("recommend", moved, "--measure")
    assert result.exit_code == 1 and "gone.py" in result.output


def test_each_measured_action_has_its_whole_model_prediction(measured):
    _, doc = measured
    actions = {a["action"]: a for a in doc["actions"]}
    assert {"sdpa", "compile"} <= set(actions)
    for a in actions.values():
        assert a["measured"]["status"] in STATUSES
        assert a["predicted_gain_frac"] is None or 0 < a["predicted_gain_frac"] < 1
    # compile carries out at least every compile recommendation: its union is no smaller than any one of them
    compile_recs = [r["estimated_gain_frac"] for r in doc["recommendations"]
                    if r["action"] == "compile" and r["estimated_gain_frac"] is not None]
    assert actions["compile"]["predicted_gain_frac"] >= max(compile_recs) - 1e-9


def test_the_search_is_recorded_and_the_plan_written_as_code(measured):
    run, doc = measured
    m = doc["measurement"]
    assert m["explored"] >= 2 and m["timing"].startswith("back-to-back") and m["log"] == "measure.log"
    record = json.loads((run / "experiments.json").read_text())
    assert record["complete"] and len(record["trials"]) >= m["explored"]
    plan = doc["plan"]["actions"]
    emitted = run.parent / "plan.py"
    assert emitted.is_file() == bool(plan)
    if plan:
        assert f"PLAN = {tuple(plan)!r}" in emitted.read_text()


def test_emit_plan_refuses_a_file_it_did_not_write_before_measuring(measured, tmp_path):
    run, _ = measured
    mine = tmp_path / "train.py"
    mine.write_text("# my training script\n")
    result = invoke("recommend", run, "--measure", "--emit-plan", mine)
    assert result.exit_code == 1 and "was not written by advisor" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert mine.read_text() == "# my training script\n"
