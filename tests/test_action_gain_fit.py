"""The fitted action-gain model: intervals, the fit, the shipped file, the at-roof and step bounds."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from kernel_advisor.recommend.gain import (
    GainEstimate, HOST_GAPS, changes_roof, row_bucket, gain_frac_of_step, in_step_time, profiled_to_step_factor,
    without_at_roof_rows)
from kernel_advisor.recommend.gain_fit import (
    FEATURES, FamilyFit, GainInterval, combined_interval, load_gain_fit, memory_bound_frac, predicted_gain_interval)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks" / "advice"))
import fit_action_gain as fag  # noqa: E402


def test_interval_holds_the_value_and_stays_in_range():
    fit = FamilyFit({"predicted_frac": 2.0}, -0.3, 0.2, 10)
    iv = predicted_gain_interval({"predicted_frac": 0.7}, fit)
    assert iv.value == 1.0 and iv.high == 1.0 and iv.low == 1.0  # raw 1.4: held to the step
    small = predicted_gain_interval({"predicted_frac": 0.05}, fit)
    assert small.low == pytest.approx(-0.2) and small.value == pytest.approx(0.1) and small.high == pytest.approx(0.3)


def test_combined_actions_never_exceed_the_step():
    iv = combined_interval([GainInterval(0.9, 0.8, 1.0), GainInterval(0.5, 0.2, 0.7)])
    assert iv.value == pytest.approx(1 - 0.1 * 0.5) and iv.value <= 1.0 and iv.high <= 1.0


def test_memory_bound_share_leaves_out_leave_it_small_and_host_bound_hotspots():
    spots = [(50.0, "memory-bound", "compile"), (30.0, "memory-bound", "leave-it"), (1.0, "latency-bound", "compile"),
             (19.0, "compute-bound", "library")]
    assert memory_bound_frac(spots, host_gap_frac=0.5) == pytest.approx(0.25)


def test_lad_fit_is_monotone_and_ignores_an_outlier():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 0.8, 40)
    rows = pd.DataFrame({"model": [f"m{i % 8}" for i in range(40)], "predicted_frac": x, "host_gap_frac": 0.0,
                         "memory_bound_frac": 0.0, "measured": 0.5 * x})
    rows.loc[0, "measured"] = -0.9  # one slowdown must not drag every prediction down
    fit = fag.fit_family(rows, FEATURES)
    assert fit.coefficients["predicted_frac"] == pytest.approx(0.5, abs=1e-6)
    assert all(c >= 0 for c in fit.coefficients.values())
    assert fit.residual_low <= 0.0 <= fit.residual_high


def test_shipped_fit_loads_with_provenance_and_a_default():
    fits = load_gain_fit()
    assert "default" in fits["cuda"] and fits["cuda"]["compile"].n >= 10
    import yaml
    doc = yaml.safe_load(Path(fag.FIT_FILE).read_text())
    assert doc["rows_used"] > 100 and doc["commit"] and doc["gpu"] and doc["date"]


def test_no_saving_on_an_op_at_its_roof_unless_the_action_moves_the_roof():
    gain = GainEstimate(3e-3, {row_bucket(1): 1e-3, row_bucket(2): 2e-3}, "roof")
    cut = without_at_roof_rows(gain, {row_bucket(1): 0.91, row_bucket(2): 0.4})
    assert cut.saving_per_step_s == pytest.approx(2e-3) and "row 1 at 91%" in cut.basis
    assert not changes_roof("roofline", "compile") and changes_roof("roofline", "sdpa")
    assert changes_roof("precision", "float8:compile") and changes_roof("fused-roofline", "compile")


def test_profiled_time_is_scaled_to_the_step_and_no_share_exceeds_it():
    assert profiled_to_step_factor(1e-3, 5e-4) == 1.0
    k = profiled_to_step_factor(1e-3, 4e-3)
    assert k == pytest.approx(0.25)
    scaled = in_step_time(GainEstimate(4e-3, {row_bucket(0): 3e-3, HOST_GAPS: 1e-3}, "b"), k)
    assert scaled.row_saving_per_step_s[row_bucket(0)] == pytest.approx(7.5e-4) and scaled.row_saving_per_step_s[HOST_GAPS] == 1e-3
    assert gain_frac_of_step(5e-3, 1e-3) == 1.0 and gain_frac_of_step(None, 1e-3) is None


def test_the_docs_table_is_the_one_the_script_renders():
    text = Path(fag.DOC).read_text()
    assert fag.BEGIN in text and fag.END in text and "leave one model out" in text.lower()
