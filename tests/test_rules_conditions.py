"""Structured conditions and message templates: comparisons, missing evidence, display units."""
from __future__ import annotations

import math

import pytest

from kernel_advisor.recommend.conditions import (
    ConditionValueError, Range, check, evaluate, parse_condition)
from kernel_advisor.recommend.messages import TemplateError, fill_message, validate_template


def cond(key, value, scope="op"):
    return parse_condition(key, value, scope)


@pytest.mark.parametrize("x, ok", [(0.0, False), (0.1, True), (0.35, True), (0.6, False), (0.7, False)])
def test_range_min_inclusive_max_exclusive(x, ok):
    assert Range(0.1, 0.6).contains(x) is ok


def test_range_descriptions():
    assert Range(None, 2).describe() == "< 2"
    assert Range(0.7, None).describe() == ">= 0.7"
    assert Range(1, 5).describe() == ">= 1 and < 5"


@pytest.mark.parametrize("actual", [None, float("nan"), "0.3", True])
def test_missing_or_non_numeric_evidence_never_matches(actual):
    c = check("efficiency_frac", cond("efficiency_frac", {"max": 0.6}), {"efficiency_frac": actual})
    assert not c.ok and c.expected == "< 0.6"


@pytest.mark.parametrize("name, ok", [("aten::conv2d", True), ("aten::cudnn_convolution", True),
                                      ("aten::linear", False), ("mylib::conv2d", False)])
def test_op_globs(name, ok):
    parsed = cond("ops", ["aten::conv*", "aten::cudnn_convolution*"])
    assert check("ops", parsed, {"name": name}).ok is ok
    assert check("not_ops", cond("not_ops", ["aten::conv*", "aten::cudnn_convolution*"]),
                 {"name": name}).ok is (not ok)


def test_single_string_is_a_one_item_list():
    assert cond("verdict", "memory-bound") == ("memory-bound",)


@pytest.mark.parametrize("cap, ok", [([7, 5], False), ([8, 0], True), ([8, 9], True), ([9, 0], True),
                                     ([10, 0], False), (None, False)])
def test_capability_range(cap, ok):
    parsed = cond("capability", {"min": [8, 0], "max": [10, 0]})
    assert check("capability", parsed, {"capability": cap}).ok is ok


def test_settings_all_keys_must_match():
    parsed = cond("settings", {"allow_tf32_matmul": False, "mode": ["train"]})
    assert check("settings", parsed, {"settings": {"allow_tf32_matmul": False, "mode": "train"}}).ok
    assert not check("settings", parsed, {"settings": {"allow_tf32_matmul": True, "mode": "train"}}).ok
    assert not check("settings", parsed, {"settings": {"allow_tf32_matmul": False}}).ok


@pytest.mark.parametrize("dims, ok", [({"K": 4096, "N": 50257}, True), ({"K": 4096, "N": 50304}, False),
                                      ({"C_in": 3, "C_out": 64}, True), (None, False)])
def test_dims_not_multiple_of(dims, ok):
    # 50257 % 8 = 1; 50304 = 8 * 6288; 3 % 8 = 3
    assert check("dims_not_multiple_of", cond("dims_not_multiple_of", 8), {"alignment_dims": dims}).ok is ok


@pytest.mark.parametrize("key, value, fragment", [
    ("ops", [], "non-empty list"),
    ("ops", [1, 2], "list of strings"),
    ("verdict", "fast", "unknown value(s)"),
    ("share_pct", 2, "must be a mapping"),
    ("share_pct", {"below": 2}, "unknown range key"),
    ("share_pct", {"max": True}, "must be numbers"),
    ("capability", {"min": [8]}, "[major, minor]"),
    ("settings", {"allow_tf32_matmul": "no"}, "true or false"),
    ("settings", {"mode": "serve"}, "unknown value(s)"),
    ("settings", {"fast": True}, "unknown setting"),
    ("dims_not_multiple_of", 1, "integer >= 2"),
    ("pattern", "naive-attention", "does not apply to scope 'op'"),
    ("nope", 1, "unknown condition"),
])
def test_bad_condition_values(key, value, fragment):
    with pytest.raises(ConditionValueError, match=None) as info:
        cond(key, value)
    assert fragment in str(info.value)


def test_evaluate_keeps_order_and_reports_each_check():
    conditions = {"verdict": cond("verdict", "memory-bound"), "share_pct": cond("share_pct", {"min": 2})}
    checks = evaluate(conditions, {"verdict": "memory-bound", "share_pct": 1.5})
    assert [(c.key, c.ok, c.actual) for c in checks] == [("verdict", True, "memory-bound"),
                                                          ("share_pct", False, 1.5)]


# ---------------------------------------------------------------- messages


def test_message_scales_si_evidence_to_display_units():
    evidence = {"name": "aten::softmax", "share_pct": 12.345, "time_per_step_s": 0.0015,
                "efficiency_frac": 0.25, "bandwidth_bytes_per_s": 4.8e12, "kernel_time_per_launch_s": 3e-6}
    text = fill_message("{name}: {share_pct:.1f} %, {time_per_step_ms:.2f} ms, {efficiency_pct:.0f} % of "
                        "{bandwidth_gbps:.0f} GB/s, {kernel_time_per_launch_us:.1f} us", evidence, "op")
    # 0.0015 s = 1.50 ms; 0.25 = 25 %; 4.8e12 B/s = 4800 GB/s; 3e-6 s = 3.0 us
    assert text == "aten::softmax: 12.3 %, 1.50 ms, 25 % of 4800 GB/s, 3.0 us"


def test_message_missing_values_render_as_unknown_and_nan():
    assert fill_message("{dtype} {share_pct:.1f}", {}, "op") == "unknown nan"


@pytest.mark.parametrize("template, scope, fragment", [
    ("{names}", "op", "not available in scope 'op'"),
    ("{name}", "run", "not available in scope 'run'"),
    ("{0}", "op", "plain name"),
    ("{name[0]}", "op", "plain name"),
    ("{name!s}", "op", "conversions"),
    ("{share_pct:{name}}", "op", "nested fields"),
    ("{share_pct:q}", "op", "share_pct:q"),
    ("unbalanced {", "op", "message template"),
])
def test_bad_templates(template, scope, fragment):
    with pytest.raises(TemplateError) as info:
        validate_template(template, scope)
    assert fragment in str(info.value)


def test_nan_evidence_formats_without_error():
    assert math.isnan(float(fill_message("{share_pct}", {"share_pct": None}, "pattern")))
