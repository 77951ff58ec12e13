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


def _advice(points, rule="compile-fuse-elementwise", device="NVIDIA H200", verdict="faster"):
    return pd.DataFrame([{"model": f"m{i}", "kind": "rule", "rule_id": rule, "subject": "s", "status": "passed",
                          "device_name": device, "predicted_gain_frac": p, "measured_gain_frac": m,
                          "verdict": verdict} for i, (p, m) in enumerate(points)])


def test_scale_is_least_squares_through_the_origin():
    # Σpm / Σp² = (0.1·0.2 + 0.2·0.4 + 0.3·0.6) / (0.01 + 0.04 + 0.09) = 0.28 / 0.14 = 2.0
    rows = fit.finding_rows(_advice([(0.1, 0.2), (0.2, 0.4), (0.3, 0.6)]))
    assert fit.fit_scales(rows) == {("cuda", "compile-fuse-elementwise"): (pytest.approx(2.0), 3)}


def test_subjects_of_one_finding_are_summed():
    advice = _advice([(0.1, 0.5), (0.2, 0.5)])
    advice["model"] = "same"  # two subjects of one rule in one model: predicted 0.3, measured 0.5
    rows = fit.finding_rows(advice)
    assert len(rows) == 1 and rows.iloc[0]["predicted"] == pytest.approx(0.3)


def test_too_few_points_and_unfaster_findings_are_not_fitted():
    assert fit.fit_scales(fit.finding_rows(_advice([(0.1, 0.3), (0.2, 0.5)]))) == {}
    slower = _advice([(0.1, -0.1)] * 4, verdict="slower")
    assert fit.fit_scales(fit.finding_rows(slower)) == {}


def test_share_within_and_leave_one_out():
    rows = fit.finding_rows(_advice([(0.1, 0.2), (0.2, 0.4), (0.3, 0.6), (0.1, 0.5)]))
    # before: |0.1-0.2| = 0.1 ≤ 0.15; 0.2, 0.3 and 0.4 are not → 1 of 4
    assert fit.share_within(rows, rows["predicted"]) == 0.25
    loo = fit.leave_one_model_out(rows)
    assert loo.notna().all() and (loo <= 0.99).all()


def test_calibration_doc_is_grouped_by_device():
    advice = _advice([(0.1, 0.2)] * 3)
    advice["gpu"], advice["commit"], advice["date"] = "NVIDIA H200", "abc1234", "2026-11-25"
    doc = fit.calibration_doc({("cuda", "r"): (2.0, 3)}, advice, fit.DEFAULT_CSV)
    assert doc["devices"] == {"cuda": {"r": {"scale": 2.0, "n": 3}}} and doc["commit"] == "abc1234"
