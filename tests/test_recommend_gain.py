"""Gain models, one by one, with the arithmetic worked by hand."""
from __future__ import annotations

import pandas as pd
import pytest
from test_recommend_support import run_meta

from kernel_advisor.recommend.evidence import run_context
from kernel_advisor.recommend.gain import HOST_GAPS, estimate_gain, row_bucket, target_peak_flops_per_s
from kernel_advisor.recommend.schema import GainSpec
from kernel_advisor.recommend.subjects import Subject

CTX = run_context(run_meta(total_device_time_s=2e-3, step_wall_s=1.5e-3, busy_s=2e-3,
                           ceilings={"peak_flops_per_s": {"fp32": 50e12, "tf32": 400e12, "bf16_tc": 800e12}}))
OPS = pd.DataFrame({"row_id": [1, 2], "roofline_per_call_s": [1e-5, float("nan")],
                    "compute_path": ["fp32", "fp32"], "peak_flops_per_s": [50e12, 50e12]})


def op_subject(row_id=1, time_s=1e-4, calls=2.0, **evidence):
    ev = {"row_id": row_id, "time_per_step_s": time_s, "calls_per_step": calls, **evidence}
    return Subject("op", f"row:{row_id}", ev, {row_id: time_s}, {row_id: calls})


def pattern_subject(times, **evidence):
    ev = {"time_per_step_s": sum(times.values()), **evidence}
    return Subject("pattern", "pattern:x", ev, dict(times), {r: 1.0 for r in times})


def gain(spec, subject):
    return estimate_gain(spec, subject, CTX, OPS)


@pytest.mark.parametrize("target, expected_s", [(1.0, 8e-5), (0.5, 6e-5), (0.1, 0.0)])
def test_roofline(target, expected_s):
    # 2 calls × 10 µs roofline / target against 100 µs measured:
    # 100 − 20 = 80 µs; 100 − 40 = 60 µs; 100 − 200 < 0 → 0
    g = gain(GainSpec("roofline", target_efficiency_frac=target), op_subject())
    assert g.saving_per_step_s == pytest.approx(expected_s)
    assert g.row_saving_per_step_s == ({row_bucket(1): pytest.approx(expected_s)} if expected_s else {})


def test_roofline_unknown_for_unmodelled_rows():
    g = gain(GainSpec("roofline"), op_subject(row_id=2))
    assert g.saving_per_step_s is None and g.basis.startswith("not estimated")


def test_fusion_bytes_and_its_cap():
    # 4e8 bytes / 4e12 B/s = 100 µs, but the chain only takes 60 µs and the fused kernel still moves
    # (4.2e8 − 4e8) bytes = 5 µs: cap 60 − 5 = 55 µs, split 2:1 over the rows by their time
    subject = pattern_subject({3: 4e-5, 4: 2e-5}, intermediate_bytes_per_step=4e8, min_bytes_per_step=4.2e8,
                              bandwidth_bytes_per_s=4e12)
    g = gain(GainSpec("fusion-bytes"), subject)
    assert g.saving_per_step_s == pytest.approx(5.5e-5)
    assert g.row_saving_per_step_s == {row_bucket(3): pytest.approx(5.5e-5 * 2 / 3), row_bucket(4): pytest.approx(5.5e-5 / 3)}


def test_fusion_bytes_uncapped():
    subject = pattern_subject({3: 4e-5}, intermediate_bytes_per_step=4e7, min_bytes_per_step=8e7,
                              bandwidth_bytes_per_s=4e12)
    assert gain(GainSpec("fusion-bytes"), subject).saving_per_step_s == pytest.approx(1e-5)  # 4e7 / 4e12


def test_fusion_bytes_unknown_without_bandwidth():
    subject = pattern_subject({3: 4e-5}, intermediate_bytes_per_step=4e7, bandwidth_bytes_per_s=None)
    assert gain(GainSpec("fusion-bytes"), subject).saving_per_step_s is None


def test_fraction():
    assert gain(GainSpec("fraction", value=0.25), op_subject()).saving_per_step_s == pytest.approx(2.5e-5)


@pytest.mark.parametrize("path, expected_s", [("tf32", 1.75e-3), ("bf16_tc", 1.875e-3)])
def test_precision_compute_bound(path, expected_s):
    # roof: max(20e9/50e12, 40e6/4e12) = 400 µs; 1000 µs measured per call (40 %), 2 calls per step
    # tf32: roof 50 µs → 1000 × 50/400 = 125 µs per call → (1000 − 125) × 2 = 1750 µs
    # bf16: roof 25 µs → 62.5 µs per call → (1000 − 62.5) × 2 = 1875 µs
    subject = op_subject(flops_per_call=20e9, bytes_per_call=40e6, peak_flops_per_s=50e12, bandwidth_bytes_per_s=4e12,
                         device_time_per_call_s=1e-3, compute_path="fp32")
    g = gain(GainSpec("precision", target_path=path), subject)
    assert g.saving_per_step_s == pytest.approx(expected_s)


def test_precision_memory_bound_gains_nothing():
    # roof max(1e6/50e12 = 20 ns, 4e7/4e12 = 10 µs) is the memory roof on every path
    subject = op_subject(flops_per_call=1e6, bytes_per_call=4e7, peak_flops_per_s=50e12, bandwidth_bytes_per_s=4e12,
                         device_time_per_call_s=1e-4, compute_path="fp32")
    assert gain(GainSpec("tf32"), subject).saving_per_step_s == 0.0


def test_precision_unknown_without_the_target_ceiling():
    subject = op_subject(flops_per_call=20e9, bytes_per_call=40e6, peak_flops_per_s=50e12, bandwidth_bytes_per_s=4e12,
                         device_time_per_call_s=1e-4)
    assert gain(GainSpec("precision", target_path="fp8_tc"), subject).saving_per_step_s is None


def test_target_peak_falls_back_to_a_row_on_that_path():
    ctx = run_context(run_meta(total_device_time_s=1.0, step_wall_s=1.0))
    ops = pd.DataFrame({"compute_path": ["tf32"], "peak_flops_per_s": [355e12]})
    assert target_peak_flops_per_s(ctx, ops, "tf32") == 355e12
    assert target_peak_flops_per_s(ctx, ops, "bf16_tc") is None


def test_launch_overhead_is_the_idle_time():
    ctx = run_context(run_meta(total_device_time_s=2e-3, step_wall_s=3e-3, busy_s=1.2e-3))
    # 2 steps: busy 0.6 ms per step of a 3 ms step → 2.4 ms idle
    run_subject = Subject("run", "run", {"host_gap_per_step_s": 2.4e-3}, {}, {})
    g = estimate_gain(GainSpec("launch-overhead"), run_subject, ctx, OPS)
    assert g.saving_per_step_s == pytest.approx(2.4e-3) and g.row_saving_per_step_s == {HOST_GAPS: 2.4e-3}


def test_none():
    g = gain(GainSpec("none"), op_subject())
    assert g.saving_per_step_s == 0.0 and g.row_saving_per_step_s == {}


def test_fused_time_is_the_fused_kernels_roofline_over_target():
    from kernel_advisor.recommend.gain import fused_time_s

    # attention-like: 137.4e9 FLOP at 800e12 FLOP/s = 171.8 µs beats 50e6 B / 4e12 B/s = 12.5 µs;
    # at 50 % of the roof: 343.6 µs
    assert fused_time_s(50e6, 137.4e9, 4e12, 800e12, 0.5) == pytest.approx(137.4e9 / 800e12 / 0.5)
    # norm-like: 12e6 B / 4e12 B/s = 3 µs, no FLOP peak known: memory side only, 3 / 0.7 = 4.2857 µs
    assert fused_time_s(12e6, 0.0, 4e12, None, 0.7) == pytest.approx(3e-6 / 0.7)
    # more intermediates than bytes (rounding in the chain's model) never gives negative time
    assert fused_time_s(-5.0, 0.0, 4e12, None, 0.7) == 0.0
