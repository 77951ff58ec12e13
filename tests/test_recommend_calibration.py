"""Fitted gain scales: applied per device type and action, each op's saving capped at its time."""
from __future__ import annotations

import pytest

from kernel_advisor.recommend.gain_fit import (CALIBRATION_FILE, ENV, ActionScale, active_calibration,
                                                  calibrated, load_calibration)
from kernel_advisor.recommend.gain import HOST_GAPS, GainEstimate, row_bucket

TABLE = {"cuda": {"compile": ActionScale(2.5, 7), "compile:reduce-overhead": ActionScale(4.0, 3),
                  "kernel": ActionScale(0.5, 4)}}


def test_scale_is_capped_at_each_ops_time():
    # rows 3 and 5 take 1.0 and 0.2 ms; the model claimed 0.3 and 0.1 ms: ×2.5 is 0.75 and 0.25,
    # but row 5 cannot save more than its own 0.2 ms → 0.75 + 0.2 = 0.95 ms
    gain = GainEstimate(0.4e-3, {row_bucket(3): 0.3e-3, row_bucket(5): 0.1e-3}, "fused")
    out = calibrated(gain, "compile", "cuda", {3: 1.0e-3, 5: 0.2e-3}, TABLE)
    assert out.saving_per_step_s == pytest.approx(0.95e-3)
    assert out.row_saving_per_step_s == pytest.approx({row_bucket(3): 0.75e-3, row_bucket(5): 0.2e-3})
    assert "× 2.50 fitted to 7 measurements of compile" in out.basis


def test_pseudo_rows_are_not_capped():
    gain = GainEstimate(1e-3, {HOST_GAPS: 1e-3}, "launch gaps")
    out = calibrated(gain, "compile:reduce-overhead", "cuda", {}, TABLE)
    assert out.saving_per_step_s == pytest.approx(4e-3)


@pytest.mark.parametrize("action,device", [("compile", "cpu"), ("sdpa", "cuda")])
def test_other_devices_and_unfitted_actions_are_unchanged(action, device):
    gain = GainEstimate(0.4e-3, {row_bucket(3): 0.4e-3}, "x")
    assert calibrated(gain, action, device, {3: 1e-3}, TABLE) is gain


def test_bundled_kernels_share_one_scale():
    # 0.4 ms claimed on a 1 ms op, kernel family × 0.5 → 0.2 ms
    gain = GainEstimate(0.4e-3, {row_bucket(3): 0.4e-3}, "kernel at its efficiency")
    out = calibrated(gain, "kernel:triton.gelu", "cuda", {3: 1e-3}, TABLE)
    assert out.saving_per_step_s == pytest.approx(0.2e-3)


def test_shipped_calibration_loads():
    table = load_calibration()
    for rules in table.values():
        assert all(s.scale > 0 and s.n >= 3 for s in rules.values())


def test_the_shipped_fit_is_in_force_unless_turned_off(monkeypatch, tmp_path):
    monkeypatch.delenv(ENV, raising=False)
    assert active_calibration() == load_calibration(CALIBRATION_FILE)
    monkeypatch.setenv(ENV, "off")
    assert active_calibration() == {}
    other = tmp_path / "fit.yaml"
    other.write_text("version: 2\ndevices:\n  cuda:\n    compile: {scale: 2.0, n: 5}\n")
    monkeypatch.setenv(ENV, str(other))
    assert active_calibration() == {"cuda": {"compile": ActionScale(2.0, 5)}}
    # 0.1 ms claimed on a 1 ms op, × 2.0 from the named file → 0.2 ms
    gain = calibrated(GainEstimate(0.1e-3, {row_bucket(3): 0.1e-3}, "x"), "compile", "cuda", {3: 1e-3})
    assert gain.saving_per_step_s == pytest.approx(0.2e-3)
