"""The plan's choice of actions and the measured ranking, on hand-made outcomes."""
from __future__ import annotations

import pytest

from kernel_advisor.actions import get_action
from kernel_advisor.collect.loop_timing import Estimate
from kernel_advisor.experiment.trial import Outcome
from kernel_advisor.experiment.variant import conflicts
from kernel_advisor.recommend.measured import rerank
from kernel_advisor.recommend.measured import credit_note, credited
from kernel_advisor.recommend.engine import Finding, Recommendation


def faster(gain: float) -> Outcome:
    speed = 1 / (1 - gain)  # gain 0.5 of the step is a 2× speedup
    return Outcome("passed", speedup=Estimate(speed, speed * 0.95, speed * 1.05), gain_frac=gain, verdict="faster")


def no_difference() -> Outcome:
    return Outcome("passed", speedup=Estimate(1.0, 0.97, 1.03), gain_frac=0.0, verdict="no measurable difference")


@pytest.mark.parametrize("a,b,clash", [
    ("compile", "compile:reduce-overhead", True),  # one compile mode per plan
    ("kernel:triton.rms_norm", "compile", False),  # a bundled kernel goes inside compile as its operator
    ("compile", "kernel:triton.softmax", False),
    ("float8", "bf16_autocast", True),  # one number format
    ("float8:compile", "bf16_autocast", True),
    ("bf16_autocast", "compile", False),
    ("sdpa", "rms_norm_module", False),
])
def test_conflicts(a, b, clash):
    assert conflicts(get_action(a), get_action(b)) is clash


def _finding(rank: int, rule_id: str, action: str, pct: float) -> Finding:
    rec = Recommendation(rule_id=rule_id, title=rule_id, tier="library", scope="op", subject=f"row:{rank}",
                         label="x", message="m", saving_per_step_s=pct / 1e3, saving_pct=pct,
                         row_saving_per_step_s={}, action=action)
    return Finding(rank=rank, rule_id=rule_id, title=rule_id, tier="library", saving_per_step_s=pct / 1e3,
                   saving_pct=pct, recommendations=(rec,))


def test_rerank_puts_measured_gains_first_then_predicted_order():
    findings = [_finding(1, "a", "sdpa", 30), _finding(2, "b", "compile", 20), _finding(3, "c", "none", 10),
                _finding(4, "d", "pad_gemm", 5)]
    by_rec = {("a", "row:1"): no_difference(), ("b", "row:2"): faster(0.4),
              ("c", "row:3"): Outcome("not-measurable", "no action"), ("d", "row:4"): faster(0.1)}
    assert rerank(findings, by_rec) == ("b", "d", "a", "c")


def test_a_recommendation_beyond_top_is_not_measurable_and_says_top():
    from kernel_advisor.recommend.measured import _outcome_for

    rec = _finding(4, "d", "pad_gemm", 5).recommendations[0]
    got = _outcome_for(rec, {"sdpa": faster(0.3)}, beyond={"pad_gemm"}, top=2)
    assert got.status == "not-measurable" and "outside the top 2 recommendations (--top)" in got.reason
    assert _outcome_for(rec, {"pad_gemm": faster(0.1)}, beyond=set(), top=2).status == faster(0.1).status


def timed(speed: float, half_width: float) -> Outcome:
    """A faster outcome with the given speedup and interval half-width."""
    return Outcome("passed", speedup=Estimate(speed, speed - half_width, speed + half_width),
                   gain_frac=1 - 1 / speed, verdict="faster")


@pytest.mark.parametrize("default,graphs,expected", [
    (timed(2.17, 0.01), timed(2.21, 0.005), "compile:reduce-overhead"),  # intervals apart: the graph mode
    (timed(2.32, 0.05), timed(2.36, 0.05), "compile"),  # overlapping: the cheaper mode keeps it
    (no_difference(), timed(1.41, 0.03), "compile:reduce-overhead"),  # only the graph mode is faster
    (timed(1.2, 0.02), Outcome("error", "capture failed"), "compile"),
])
def test_a_compile_recommendation_is_credited_with_the_mode_that_measured_clearly_faster(default, graphs, expected):
    outcomes = {"compile": default, "compile:reduce-overhead": graphs}
    assert credited("compile", outcomes) == expected
    assert credited("compile", {"compile": default}) == "compile"  # the mode was not measured


def test_credit_note_names_both_measurements():
    outcomes = {"compile": no_difference(), "compile:reduce-overhead": timed(1.41, 0.03)}
    assert credit_note("compile", "compile:reduce-overhead", outcomes) == (
        "measured as compile:reduce-overhead: 1.41× [1.38–1.44], against compile's 1× [0.97–1.03]")
