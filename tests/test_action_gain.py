"""An action's predicted gain on the whole model: the row-wise union of the recommendations it carries out."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from kernel_advisor.actions import fixed_by
from kernel_advisor.recommend.report import action_gain_frac, action_row_saving_per_step_s


def _rec(action, rows, **evidence):
    return SimpleNamespace(action=action, row_saving_per_step_s=rows, evidence=evidence)


def _report(step_s=10e-3):
    findings = [SimpleNamespace(recommendations=[_rec("compile", {"3": 1e-3, "4": 0.5e-3}), _rec("compile", {"3": 2e-3})]),
                SimpleNamespace(recommendations=[_rec("pad_gemm", {"7": 1e-3})]),
                SimpleNamespace(recommendations=[_rec("sdpa", {"8": 4e-3})]),
                SimpleNamespace(recommendations=[_rec("compile:reduce-overhead", {"host-gaps": 2e-3})])]
    suppressed = [_rec("compile", {"9": 1e-3}, covered_by="lib-sdpa on pattern:naive-attention:8-9"),
                  _rec("compile", {"10": 5e-3})]  # closed by a leave-it verdict: not counted
    return SimpleNamespace(findings=findings, suppressed=suppressed, ctx=SimpleNamespace(step_s=step_s))


def test_compile_is_the_union_of_its_rows_and_what_inductor_also_does():
    # row 3: max(1, 2) = 2 ms; row 4: 0.5; row 7 (pad_gemm: inductor pads GEMMs): 1; row 9 (a
    # chain SDPA covers, which compile fuses anyway): 1 → 4.5 ms of a 10 ms step = 0.45
    rows = action_row_saving_per_step_s(_report(), "compile")
    assert rows == pytest.approx({"3": 2e-3, "4": 0.5e-3, "7": 1e-3, "9": 1e-3})
    assert action_gain_frac(_report(), "compile") == pytest.approx(0.45)


def test_reduce_overhead_adds_the_host_gaps_to_compile():
    # 4.5 ms of compile's rows + 2 ms of launch gaps that CUDA graphs remove = 0.65
    assert action_gain_frac(_report(), "compile:reduce-overhead") == pytest.approx(0.65)


@pytest.mark.parametrize("action,expected", [("sdpa", 0.4), ("pad_gemm", 0.1), ("rms_norm_module", None)])
def test_other_actions_count_their_own_rows(action, expected):
    assert action_gain_frac(_report(), action) == (None if expected is None else pytest.approx(expected))


def test_the_gain_stays_below_the_step():
    # 4.5 ms of savings on a step timed at 3 ms (timed apart from the ops): clamped below 1
    assert action_gain_frac(_report(step_s=3e-3), "compile") == pytest.approx(0.99)


def test_fixed_by():
    assert fixed_by("compile:reduce-overhead") == {"compile:reduce-overhead", "compile", "pad_gemm"}
    assert fixed_by("kernel:triton.gelu") == {"kernel:triton.gelu"} and fixed_by("none") == {"none"}
