"""Fitted gain scales: applied per device type and rule, each op's saving capped at its time."""
from __future__ import annotations

import pytest

from kernel_advisor.recommend.calibration import RuleScale, calibrated, load_calibration
from kernel_advisor.recommend.gain import GainEstimate

TABLE = {"cuda": {"compile-fuse-elementwise": RuleScale(2.5, 7), "compile-cuda-graphs": RuleScale(4.0, 3)}}


def test_scale_is_capped_at_each_ops_time():
    # rows 3 and 5 take 1.0 and 0.2 ms; the model claimed 0.3 and 0.1 ms: ×2.5 is 0.75 and 0.25,
    # but row 5 cannot save more than its own 0.2 ms → 0.75 + 0.2 = 0.95 ms
    gain = GainEstimate(0.4e-3, {"3": 0.3e-3, "5": 0.1e-3}, "fused")
    out = calibrated(gain, "compile-fuse-elementwise", "cuda", {3: 1.0e-3, 5: 0.2e-3}, TABLE)
    assert out.saving_per_step_s == pytest.approx(0.95e-3)
    assert out.row_saving_per_step_s == pytest.approx({"3": 0.75e-3, "5": 0.2e-3})
    assert "× 2.50 fitted to 7 measured models" in out.basis


def test_pseudo_rows_are_not_capped():
    gain = GainEstimate(1e-3, {"host-gaps": 1e-3}, "launch gaps")
    out = calibrated(gain, "compile-cuda-graphs", "cuda", {}, TABLE)
    assert out.saving_per_step_s == pytest.approx(4e-3)


@pytest.mark.parametrize("rule,device", [("compile-fuse-elementwise", "cpu"), ("lib-sdpa", "cuda")])
def test_other_devices_and_unfitted_rules_are_unchanged(rule, device):
    gain = GainEstimate(0.4e-3, {"3": 0.4e-3}, "x")
    assert calibrated(gain, rule, device, {3: 1e-3}, TABLE) is gain


def test_shipped_calibration_loads():
    table = load_calibration()
    for rules in table.values():
        assert all(s.scale > 0 and s.n >= 3 for s in rules.values())
