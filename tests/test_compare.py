"""`advisor compare`: step time, per-op deltas, new/vanished hotspots, recommendation outcomes."""
import json
import math

import pytest
from typer.testing import CliRunner

from kernel_advisor.analyze.compare import compare_runs, context_changes, op_key
from kernel_advisor.records.recommendations import load_recommendations
from kernel_advisor.collect.rundir import load_run
from kernel_advisor.render.compare_render import compare_json, compare_renderables, headline
from run_factory import BF16_ACT, OpSpec, gpt_like_ops, recommendations_doc, write_run

MS = 1e-3


def after_ops() -> list[OpSpec]:
    """Run B, 4 steps: softmax replaced by a Triton kernel, linear faster, a tiny new fill_."""
    a = {op.name: op for op in gpt_like_ops()}
    return [
        OpSpec("aten::linear", a["aten::linear"].shapes, a["aten::linear"].dtypes, 8, 3.2e-3, "attn",
               flops=1.37e11, bytes=1.0e8, compute_path="bf16_tc", verdict="compute-bound"),
        OpSpec("triton_per_fused__softmax_0", [], [], 4, 0.8e-3, "attn", kind="kernel"),
        OpSpec("aten::layer_norm", a["aten::layer_norm"].shapes, a["aten::layer_norm"].dtypes, 4, 0.8e-3, "mlp"),
        OpSpec("aten::add", a["aten::add"].shapes, a["aten::add"].dtypes, 4, 0.4e-3, "mlp"),
        OpSpec("aten::copy_", a["aten::copy_"].shapes, a["aten::copy_"].dtypes, 4, 0.2e-3),
        OpSpec("mylib::fused_rope", [BF16_ACT], ["bfloat16"], 4, 0.2e-3, "attn"),
        OpSpec("aten::fill_", [[4096]], ["float32", "scalar"], 4, 0.02e-3),
    ]


@pytest.fixture
def two_runs(tmp_path):
    """run.json as an older advisor wrote it (no `step_s`): the step time is worked out from the
    unprofiled steps, not the profiled ones (each 0.2 ms slower here)."""
    a = write_run(tmp_path / "a", gpt_like_ops(), steps=2, step_wall_s=[0.0026, 0.0024],
                  unprofiled_step_wall_s=[0.0024, 0.0022], recommendations=recommendations_doc(softmax_row_id=1))
    b_settings = {"allow_tf32_matmul": True, "allow_tf32_cudnn": True, "float32_matmul_precision": "highest",
                  "cudnn_benchmark": False, "mode": "inference", "dtype": "bfloat16"}
    b = write_run(tmp_path / "b", after_ops(), steps=4, step_wall_s=[0.0018, 0.0017, 0.0019, 0.0017],
                  unprofiled_step_wall_s=[0.0016, 0.0015, 0.0017, 0.0015], settings=b_settings)
    return a, b


def _row(ops, name):
    rows = ops[ops["name"] == name]
    assert len(rows) == 1, name
    return rows.iloc[0]


def test_step_time_and_device_time_hand_worked(two_runs):
    a, b = two_runs
    cmp = compare_runs(load_run(a), load_run(b))
    assert cmp.step_a_s == pytest.approx(0.0023)  # median(2.4, 2.2) ms, the unprofiled steps
    assert cmp.step_b_s == pytest.approx(0.00155)  # median(1.5, 1.5, 1.6, 1.7) ms = (1.5 + 1.6) / 2
    # Order-statistic intervals: 2 steps → [min, max] (covers 50 %); 4 steps → [min, max] (87.5 %).
    assert (cmp.step_a.low_s, cmp.step_a.high_s) == pytest.approx((0.0022, 0.0024))
    assert (cmp.step_b.low_s, cmp.step_b.high_s) == pytest.approx((0.0015, 0.0017))
    assert cmp.step_a.confidence == pytest.approx(0.5) and cmp.step_b.confidence == pytest.approx(0.875)
    assert cmp.step_a.source == "unprofiled" and cmp.step_verdict == "faster"  # 1.7 ms < 2.2 ms: apart
    assert cmp.step_ratio == pytest.approx(0.00155 / 0.0023)  # 0.6739
    assert cmp.speedup == pytest.approx(0.0023 / 0.00155)  # 1.4839
    assert cmp.device_per_step_a_s == pytest.approx(2.0 * MS)  # 4.0 ms over 2 steps
    assert cmp.device_per_step_b_s == pytest.approx(1.405 * MS)  # 5.62 ms over 4 steps


def test_per_op_deltas_hand_worked(two_runs):
    a, b = two_runs
    ops = compare_runs(load_run(a), load_run(b)).ops
    assert ops.iloc[0]["name"] == "aten::_softmax"  # the largest |delta|: 0.6 ms/step gone
    softmax = _row(ops, "aten::_softmax")
    assert (softmax.in_a, softmax.in_b) == (True, False)
    assert softmax.time_per_step_a_s == pytest.approx(0.6 * MS) and softmax.time_per_step_b_s == 0.0  # 1.2 ms / 2 steps
    assert softmax.delta_per_step_s == pytest.approx(-0.6 * MS) and math.isnan(softmax.ratio)
    linear = _row(ops, "aten::linear")
    assert linear.time_per_step_a_s == pytest.approx(1.0 * MS)  # 2.0 ms / 2 steps
    assert linear.time_per_step_b_s == pytest.approx(0.8 * MS)  # 3.2 ms / 4 steps
    assert linear.delta_per_step_s == pytest.approx(-0.2 * MS) and linear.ratio == pytest.approx(0.8)
    assert (linear.calls_per_step_a, linear.calls_per_step_b) == (2.0, 2.0)  # 4 calls / 2 steps, 8 / 4
    ln = _row(ops, "aten::layer_norm")
    assert ln.delta_per_step_s == pytest.approx(0.0, abs=1e-12) and ln.ratio == pytest.approx(1.0)  # 0.4/2 = 0.8/4
    triton = _row(ops, "triton_per_fused__softmax_0")
    assert (triton.in_a, triton.in_b, triton.time_per_step_b_s) == (False, True, pytest.approx(0.2 * MS))
    # Every delta together is the change of device time per step: 1.405 - 2.0 = -0.595 ms.
    assert ops["delta_per_step_s"].sum() == pytest.approx(-0.595 * MS)
    assert len(ops) == 8  # 6 ops in A, softmax gone, triton kernel and fill_ new: 6 + 2


def test_new_and_vanished_hotspots(two_runs):
    a, b = two_runs
    cmp = compare_runs(load_run(a), load_run(b))
    assert list(cmp.vanished_hotspots["name"]) == ["aten::_softmax"]  # 30 % of A
    # The Triton kernel is 0.8 / 5.62 = 14.2 % of B; fill_ (0.02 / 5.62 = 0.36 %) is under 1 %.
    assert list(cmp.new_hotspots["name"]) == ["triton_per_fused__softmax_0"]
    assert cmp.new_hotspots.iloc[0]["share_b_pct"] == pytest.approx(100 * 0.8 / 5.62)
    lowered = compare_runs(load_run(a), load_run(b), min_share_pct=0.3)
    assert set(lowered.new_hotspots["name"]) == {"triton_per_fused__softmax_0", "aten::fill_"}


def test_context_changes_name_the_setting_and_ignore_step_counts(two_runs):
    a, b = two_runs
    changes = compare_runs(load_run(a), load_run(b)).context_changes
    assert [(c.section, c.key, c.a, c.b) for c in changes] == [("settings", "allow_tf32_matmul", False, True)]
    other_gpu = context_changes({"device": {"name": "NVIDIA H100"}}, {"device": {"name": "NVIDIA H200"}})
    assert [(c.key, c.a, c.b) for c in other_gpu] == [("name", "NVIDIA H100", "NVIDIA H200")]


def test_recommendation_before_and_after(two_runs):
    a, b = two_runs
    run_a = load_run(a)
    outcomes = compare_runs(run_a, load_run(b), load_recommendations(a)).recommendations
    fuse, tf32 = outcomes
    assert (fuse.rule_id, fuse.scope, fuse.ops_matched) == ("fuse-softmax", "ops", 1)
    assert fuse.estimated_gain_s == pytest.approx(0.4 * MS)
    assert fuse.before_s == pytest.approx(0.6 * MS) and fuse.after_s == 0.0  # softmax gone from B
    assert fuse.observed_gain_s == pytest.approx(0.6 * MS)
    assert (tf32.scope, tf32.ops_matched) == ("run", 0)
    assert tf32.observed_gain_s == pytest.approx(0.0023 - 0.00155)  # median step A - B = 0.75 ms
    assert compare_runs(run_a, load_run(b)).recommendations is None  # not loaded: not reported


@pytest.mark.parametrize("change", ["shape", "dtype"])
def test_ops_match_on_shapes_and_dtypes_not_name_alone(tmp_path, change):
    op = OpSpec("aten::mm", [[1823, 781], [781, 127]], ["float32", "float32"], 1, 1e-3)
    other = (OpSpec("aten::mm", [[1823, 781], [781, 7]], op.dtypes, 1, 1e-3) if change == "shape"
             else OpSpec("aten::mm", op.shapes, ["bfloat16", "bfloat16"], 1, 1e-3))
    cmp = compare_runs(load_run(write_run(tmp_path / "a", [op], steps=1)),
                       load_run(write_run(tmp_path / "b", [other], steps=1)))
    assert sorted(zip(cmp.ops["in_a"], cmp.ops["in_b"])) == [(False, True), (True, False)]
    assert len(cmp.new_hotspots) == 1 and len(cmp.vanished_hotspots) == 1  # each 100 % of its run


@pytest.mark.parametrize("steps_b", [1, 7])
def test_times_are_per_step_so_step_counts_may_differ(tmp_path, steps_b):
    ops_a = gpt_like_ops()
    ops_b = [OpSpec(o.name, o.shapes, o.dtypes, o.calls * steps_b, o.device_time_total_s / 2 * steps_b, o.region)
             for o in ops_a]  # the same time per step as A's 2 steps
    cmp = compare_runs(load_run(write_run(tmp_path / "a", ops_a, steps=2)),
                       load_run(write_run(tmp_path / "b", ops_b, steps=steps_b)))
    assert cmp.ops["delta_per_step_s"].abs().max() == pytest.approx(0.0, abs=1e-15)
    assert cmp.ops["ratio"].tolist() == pytest.approx([1.0] * 6)
    assert cmp.new_hotspots.empty and cmp.vanished_hotspots.empty


def test_rows_sharing_a_key_in_two_regions_are_summed(tmp_path):
    ops = [OpSpec("aten::add", [[7, 1]], ["float32"], 2, 3e-3, "enc"),
           OpSpec("aten::add", [[7, 1]], ["float32"], 2, 1e-3, "dec")]
    cmp = compare_runs(load_run(write_run(tmp_path / "a", ops, steps=2)),
                       load_run(write_run(tmp_path / "b", ops[:1], steps=2)))
    row = cmp.ops.loc[op_key("aten::add", [[7, 1]], ["float32"])]
    # (3+1)/2, 3/2
    assert row.time_per_step_a_s == pytest.approx(2e-3) and row.time_per_step_b_s == pytest.approx(1.5e-3)
    assert row.region == "dec, enc"


def test_runs_without_step_times_have_no_ratio(tmp_path):
    op = [OpSpec("aten::relu", [[1]], ["float16"], 1, 1e-6)]
    a = load_run(write_run(tmp_path / "a", op, steps=1, step_wall_s=[0.01]))
    b = load_run(write_run(tmp_path / "b", op, steps=1, step_wall_s=[0.01]))
    b.meta["step_wall_s"] = b.meta["unprofiled_step_wall_s"] = []
    cmp = compare_runs(a, b)
    assert math.isnan(cmp.step_b_s) and math.isnan(cmp.speedup)
    assert "no step times to compare" in headline(cmp)


def test_json_and_tables(two_runs):
    a, b = two_runs
    cmp = compare_runs(load_run(a), load_run(b), load_recommendations(a))
    doc = json.loads(compare_json(cmp, top=3))
    assert len(doc["ops"]) == 3 and doc["ops_total"] == 8
    assert doc["ops"][0]["name"] == "aten::_softmax" and doc["ops"][0]["ratio"] is None  # NaN → null
    assert doc["speedup"] == pytest.approx(0.0023 / 0.00155)
    assert doc["recommendations"][0]["observed_gain_s"] == pytest.approx(0.6 * MS)
    assert [t.title for t in compare_renderables(cmp, top=3) if hasattr(t, "title")] == [
        "What else changed (run.json)", "Largest changes in device time per step (top 3)",
        "New hotspots (only in B)", "Vanished hotspots (only in A)",
        "Run A's recommendations: estimated vs observed"]
    assert "B is 1.48× faster" in headline(cmp)


# ---------------------------------------------------------------- CLI


@pytest.fixture
def cli():
    from kernel_advisor.cli import app

    return lambda *args: CliRunner().invoke(app, [str(a) for a in args])


def test_cli_compare_tables(two_runs, cli):
    a, b = two_runs
    result = cli("compare", a, b, "--top", "4")
    assert result.exit_code == 0, result.output
    assert "B is 1.48× faster" in result.output
    assert "aten::_softmax" in result.output and "fuse-softmax" in result.output


def test_cli_compare_json(two_runs, cli):
    a, b = two_runs
    result = cli("compare", a, b, "--json", "--top", "2")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert len(doc["ops"]) == 2 and doc["step_b_s"] == pytest.approx(0.00155)


@pytest.mark.parametrize("args", [("missing-a", "missing-b"), ("--top", "0")])
def test_cli_compare_bad_input_exits_1(two_runs, cli, tmp_path, args):
    a, b = two_runs
    argv = ("compare", tmp_path / args[0], b) if args[0].startswith("missing") else ("compare", a, b, *args)
    result = cli(*argv)
    assert result.exit_code == 1
    assert "advisor: error:" in result.output


# ---------------------------------------------------------------- step intervals and model files


def _step_s(value, low, high, steps=10):
    return {"value": value, "low": low, "high": high, "source": "unprofiled", "steps": steps, "confidence": 0.98}


def test_overlapping_step_intervals_are_no_measurable_difference(tmp_path):
    ops = gpt_like_ops()
    # 10 % apart by the medians, but the intervals [9, 12] and [9.5, 13] ms overlap.
    a = load_run(write_run(tmp_path / "a", ops, step_s=_step_s(0.010, 0.009, 0.012)))
    b = load_run(write_run(tmp_path / "b", ops, step_s=_step_s(0.011, 0.0095, 0.013)))
    cmp = compare_runs(a, b)
    assert cmp.step_a_s == 0.010 and cmp.step_b_s == 0.011  # run.json's step_s, not the 5 ms step lists
    assert cmp.step_verdict == "no measurable difference"
    line = headline(cmp)
    assert "no measurable difference" in line and "slower" not in line and "B/A = 1.100" in line
    doc = json.loads(compare_json(cmp, top=1))
    assert doc["step_verdict"] == "no measurable difference"
    assert doc["step_b"] == {**_step_s(0.011, 0.0095, 0.013), "basis": "median of 10 unprofiled steps"}


def test_intervals_apart_give_the_ratio(tmp_path):
    ops = gpt_like_ops()
    a = load_run(write_run(tmp_path / "a", ops, step_s=_step_s(0.010, 0.009, 0.011)))
    b = load_run(write_run(tmp_path / "b", ops, step_s=_step_s(0.0283, 0.027, 0.030)))
    cmp = compare_runs(a, b)
    assert cmp.step_verdict == "slower" and "B is 2.83× slower" in headline(cmp)


def test_a_step_time_without_interval_says_so(tmp_path):
    ops = gpt_like_ops()
    span = {"value": 0.02, "low": None, "high": None, "source": "trace-span", "steps": 3, "confidence": None}
    a = load_run(write_run(tmp_path / "a", ops, step_s=_step_s(0.010, 0.009, 0.011)))
    b = load_run(write_run(tmp_path / "b", ops, step_s=span))
    cmp = compare_runs(a, b)
    assert cmp.step_verdict == "no interval"
    assert "B is 2.00× slower (B/A = 2.000, no interval to test it against)" in headline(cmp)
    assert "whole trace / 3 steps (no step markers)" in str(compare_renderables(cmp, 1)[0])


def test_each_run_shows_its_step_time_and_basis(two_runs):
    a, b = two_runs
    text = str(compare_renderables(compare_runs(load_run(a), load_run(b)), top=1)[0])
    assert "step 2.30 ms [2.20 ms–2.40 ms, 50 % CI], median of 2 unprofiled steps" in text
    assert "step 1.55 ms [1.50 ms–1.70 ms, 88 % CI], median of 4 unprofiled steps" in text


def test_different_model_files_warn_in_one_line(tmp_path, cli):
    ops = gpt_like_ops()
    a = write_run(tmp_path / "a", ops, model={"file": "model.py", "sha256": "a" * 64, "entry": None})
    same = write_run(tmp_path / "same", ops, model={"file": "moved/model.py", "sha256": "a" * 64, "entry": None})
    other = write_run(tmp_path / "other", ops, model={"file": "model.py", "sha256": "b" * 64, "entry": None})
    assert compare_runs(load_run(a), load_run(same)).model_change is None  # same content, moved file
    result = cli("compare", a, other)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("advisor: warning:")]
    assert len(warnings) == 1 and "different model files" in warnings[0] and "aaaaaaaaaaaa" in warnings[0]
    doc = json.loads(cli("compare", a, other, "--json").stdout)
    assert doc["model_change"]["sha256_b"] == "b" * 64 and len(doc["warnings"]) == 1
    assert not cli("compare", a, same).stderr  # nothing to warn about


def test_imported_runs_have_no_model_hash_to_compare(tmp_path):
    ops = gpt_like_ops()
    trace = {"file": "trace_a.json", "sha256": None, "entry": None}
    a = load_run(write_run(tmp_path / "a", ops, model=trace))
    b = load_run(write_run(tmp_path / "b", ops, model={**trace, "file": "trace_b.json"}))
    assert compare_runs(a, b).model_change is None
