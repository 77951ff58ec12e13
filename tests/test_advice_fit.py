"""benchmarks/advice/fit_gain.py: per-rule scales from measured advice, hand-worked."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd
import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "advice" / "fit_gain.py"
_spec = importlib.util.spec_from_file_location("fit_gain", _PATH)
fit = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fit)


def _advice(points, action="compile", device="NVIDIA H200", verdict="faster"):
    """One rule row per point, in models m0, m1, …: predicted p, and the action measured m."""
    return pd.DataFrame([{"model": f"m{i}", "kind": "rule", "rule_id": "r", "subject": "row:1", "action": action,
                          "status": "passed", "device_name": device, "predicted_gain_frac": p,
                          "measured_gain_frac": m, "verdict": verdict} for i, (p, m) in enumerate(points)])


def test_scale_is_least_squares_through_the_origin():
    # Σpm / Σp² = (0.1·0.2 + 0.2·0.4 + 0.3·0.6) / (0.01 + 0.04 + 0.09) = 0.28 / 0.14 = 2.0
    rows = fit.action_rows(_advice([(0.1, 0.2), (0.2, 0.4), (0.3, 0.6)]))
    assert fit.fit_scales(rows) == {("cuda", "compile"): (pytest.approx(2.0), 3)}


def _one_model(subjects_actions_p, measured_action="compile", measured=0.5):
    rows = [{"model": "m", "kind": "rule", "rule_id": f"r{i}", "subject": s, "action": a, "status": "passed",
             "device_name": "NVIDIA H200", "predicted_gain_frac": p, "measured_gain_frac": None, "verdict": ""}
            for i, (s, a, p) in enumerate(subjects_actions_p)]
    rows.append({"model": "m", "kind": "also", "rule_id": "", "subject": "", "action": measured_action,
                 "status": "passed", "device_name": "NVIDIA H200", "predicted_gain_frac": None,
                 "measured_gain_frac": measured, "verdict": "faster"})
    return pd.DataFrame(rows)


def test_union_counts_a_subject_inside_another_once_and_adds_what_the_action_also_fixes():
    # compile on rows {3} and {3,4,5} (the first inside the second: 0.2 only), pad_gemm on {7}: 0.1,
    # which compile also does (inductor's shape padding); sdpa's 0.4 is not compile's → 0.3
    advice = _one_model([("row:3", "compile", 0.05), ("pattern:chain:3-4-5", "compile", 0.2),
                         ("row:7", "pad_gemm", 0.1), ("pattern:naive-attention:8-9", "sdpa", 0.4)])
    rows = fit.action_rows(advice)
    compile_row = rows[rows["action"] == "compile"].iloc[0]
    assert compile_row["predicted"] == pytest.approx(0.3) and compile_row["measured"] == 0.5


def test_action_rows_prefer_the_advisors_own_union():
    advice = _one_model([("row:3", "compile", 0.05)])
    advice.loc[advice["kind"] == "also", ["kind", "predicted_gain_frac"]] = ["action", 0.42]
    assert fit.action_rows(advice).iloc[0]["predicted"] == pytest.approx(0.42)


def test_bundled_kernels_share_a_family():
    advice = _advice([(0.1, 0.2), (0.2, 0.4), (0.3, 0.6)], action="kernel:triton.gelu")
    advice.loc[1, "action"] = "kernel:triton.softmax"
    assert set(fit.fit_scales(fit.action_rows(advice))) == {("cuda", "kernel")}


def test_too_few_points_and_unfaster_actions_are_not_fitted():
    assert fit.fit_scales(fit.action_rows(_advice([(0.1, 0.3), (0.2, 0.5)]))) == {}
    slower = _advice([(0.1, -0.1)] * 4, verdict="slower")
    assert fit.fit_scales(fit.action_rows(slower)) == {}


def test_share_within_and_leave_one_out():
    rows = fit.action_rows(_advice([(0.1, 0.2), (0.2, 0.4), (0.3, 0.6), (0.1, 0.5)]))
    # before: |0.1-0.2| = 0.1 ≤ 0.15; 0.2, 0.3 and 0.4 are not → 1 of 4
    assert fit.share_within(rows, rows["predicted"]) == 0.25
    loo = fit.leave_one_model_out(rows)
    assert loo.notna().all() and (loo <= 0.99).all()


def test_calibration_doc_is_grouped_by_device():
    advice = _advice([(0.1, 0.2)] * 3)
    advice["gpu"], advice["commit"], advice["date"] = "NVIDIA H200", "abc1234", "2026-11-25"
    doc = fit.calibration_doc({("cuda", "compile"): (2.0, 3)}, advice, fit.DEFAULT_CSV)
    assert doc["devices"] == {"cuda": {"compile": {"scale": 2.0, "n": 3}}} and doc["commit"] == "abc1234"


def test_a_refit_multiplies_the_scale_the_sweep_ran_under():
    # the CSV's predictions were already × 0.8: a factor of 1.5 on them is a scale of 0.8 × 1.5 = 1.2
    # (a shipped scale with no new fit, cudnn_benchmark's, is kept)
    shipped = {"cuda": {"compile": fit.ActionScale(0.8, 18), "cudnn_benchmark": fit.ActionScale(0.1, 3)}}
    composed = fit.composed_scales({("cuda", "compile"): (1.5, 5), ("cuda", "sdpa"): (1.1, 3)}, shipped)
    assert composed == {("cuda", "compile"): (pytest.approx(1.2), 5), ("cuda", "sdpa"): (pytest.approx(1.1), 3),
                        ("cuda", "cudnn_benchmark"): (0.1, 3)}


@pytest.mark.parametrize("before, held_out, kept", [(0.63, 0.58, False), (0.63, 0.63, False), (0.55, 0.62, True)])
def test_a_refit_is_kept_only_when_it_predicts_held_out_models_better(before, held_out, kept):
    assert fit.keep_fit(before, held_out) is kept
