"""The kernel rung's measured gain (recommend/kernel_gain.py, gain model `measured-kernel`): the op
row placed at the nearest shape of the kernel's sweep, its time scaled by what the kernel saved
against eager there; nothing where the kernel lost; the roofline where the sweep is silent."""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest
from test_recommend_support import run_meta

from kernel_advisor.recommend import kernel_gain
from kernel_advisor.recommend.gain_fit import ActionScale, calibrated
from kernel_advisor.recommend.evidence import run_context
from kernel_advisor.recommend.gain import estimate_gain
from kernel_advisor.recommend.kernel_gain import measured_saving, row_shape
from kernel_advisor.recommend.schema import GainSpec
from kernel_advisor.recommend.subjects import Subject
from reference_kernels.routes import Point, RouteTable


@pytest.mark.parametrize("name, shapes, expected", [
    ("aten::softmax", [[8, 16, 1000], [], []], (128, 1000)),
    ("aten::_log_softmax", [[3, 127], [], []], (3, 127)),
    ("aten::layer_norm", [[2, 16, 7, 9], [], [7, 9], [7, 9], [], []], (32, 63)),  # 2-D normalized shape
    ("aten::native_layer_norm", [[4, 768], [], [], [], []], (4, 768)),  # no weight: the last dim
    ("aten::_fused_rms_norm", [[2, 5, 4096], [], [4096], []], (10, 4096)),
    ("aten::gelu", [[2, 3, 5]], (6, 5)),
    ("aten::cross_entropy_loss", [[16, 32000], [16], [], [], [], []], (16, 32000)),
    ("aten::gelu", [[]], None),  # a scalar: no rows
    ("aten::gelu", [[0, 5]], None),
])
def test_row_shape(name, shapes, expected):
    assert row_shape(name, json.dumps(shapes)) == expected


def _point(kernel_ms, eager_ms, kernel_host_ms=0.001, eager_host_ms=0.001):
    return Point(2048, 1024, kernel_ms, kernel_host_ms, eager_ms, eager_host_ms, "GPU X", "abc1234")


def test_measured_saving_scales_the_op_time_by_the_measured_ratio():
    seen = []

    def lookup(rows, cols, dtype, train):
        seen.append((rows, cols, dtype, train))
        return _point(0.03, 0.04)

    # the kernel took 30 us where eager took 40: 25 % of the op's 200 us = 50 us
    saving, why = measured_saving("aten::softmax", [[8, 1000]], "bfloat16", True, 200e-6, lookup)
    assert saving == pytest.approx(50e-6)
    assert seen == [(8, 1000, "bfloat16", True)]
    assert "25% less than eager at 2048x1024 fwd+bwd, nearest to 8x1000" in why


def test_a_host_bound_step_counts_host_time():
    # 20 us of GPU time against 40 saves half in a device-bound step; 60 us of host time a call
    # against eager's 10 (a call every 60 us against every 40) saves nothing in a host-bound one
    point = _point(0.02, 0.04, kernel_host_ms=0.06, eager_host_ms=0.01)
    device = measured_saving("aten::gelu", [[8, 1000]], "bfloat16", False, 1e-4, lambda *a: point, False)
    host = measured_saving("aten::gelu", [[8, 1000]], "bfloat16", False, 1e-4, lambda *a: point, True)
    assert device[0] == pytest.approx(5e-5) and "of GPU time" in device[1]
    assert host[0] == 0.0 and "60.0 us against 40.0 us a call, host time counted" in host[1]


@pytest.mark.parametrize("point", [_point(0.05, 0.04), _point(math.nan, 0.04), _point(0.04, 0.04)])
def test_no_saving_where_the_kernel_lost(point):
    saving, why = measured_saving("aten::softmax", [[8, 1000]], "bfloat16", False, 200e-6,
                                  lambda *a: point)
    assert saving == 0.0 and why.startswith("lost to eager at 2048x1024 fwd")


def test_nothing_to_say_without_a_point_or_a_shape():
    assert measured_saving("aten::softmax", [[8, 1000]], "float64", False, 1e-4, lambda *a: None) is None
    assert measured_saving("aten::softmax", [[]], "bfloat16", False, 1e-4, lambda *a: _point(1, 2)) is None


CTX = run_context(run_meta(total_device_time_s=2e-3, step_wall_s=1.5e-3, busy_s=2e-3))
OPS = pd.DataFrame({"row_id": [1], "name": ["aten::_softmax"], "input_shapes": [json.dumps([[8, 1000], [], []])],
                    "roofline_per_call_s": [1e-5]})
SUBJECT = Subject("op", "row:1", {"row_id": 1, "dtype": "bfloat16"}, {1: 1e-4}, {1: 2.0})


def test_the_gain_model_reads_the_kernels_points(monkeypatch):
    table = RouteTable("triton.softmax", {("bfloat16", "fwd"): (_point(0.01, 0.04),)})
    monkeypatch.setattr(kernel_gain, "kernel_point_lookup", lambda kid: table.point)
    monkeypatch.setattr("kernel_advisor.recommend.gain.kernel_point_lookup", lambda kid: table.point)
    g = estimate_gain(GainSpec("measured-kernel", target_efficiency_frac=0.85), SUBJECT, CTX, OPS, "triton.softmax")
    assert g.measured and g.saving_per_step_s == pytest.approx(75e-6)  # 100 us x (1 - 10/40)
    assert g.basis.startswith("triton.softmax measured (benchmarks/data/kernels.csv): 75% less")
    # a measured gain is not rescaled by the fitted kernel factor
    fit = {"cuda": {"kernel": ActionScale(0.5, 4)}}
    assert calibrated(g, "kernel:triton.softmax", "cuda", {1: 1e-4}, fit).saving_per_step_s == g.saving_per_step_s


def test_unmeasured_kernels_keep_the_roofline(monkeypatch):
    monkeypatch.setattr("kernel_advisor.recommend.gain.kernel_point_lookup", lambda kid: None)
    g = estimate_gain(GainSpec("measured-kernel", target_efficiency_frac=0.5), SUBJECT, CTX, OPS, "triton.x")
    # roofline: 100 us − 2 calls × 10 us / 0.5 = 60 us
    assert not g.measured and g.saving_per_step_s == pytest.approx(60e-6)
    assert g.basis.endswith("(the sweep did not measure triton.x here)")


def test_the_shipped_triton_rule_uses_the_measured_model():
    from kernel_advisor.recommend.schema import load_rules

    rule = next(r for r in load_rules() if r.id == "triton-reference-kernel")
    assert rule.gain.model == "measured-kernel"
