"""The plan's choice of actions and the measured ranking, on hand-made outcomes."""
from __future__ import annotations

import pytest

from kernel_advisor.actions import get_action
from kernel_advisor.measure.advice import rerank
from kernel_advisor.measure.outcome import Outcome
from kernel_advisor.measure.modes import credit_note, credited, refinements_to_measure
from kernel_advisor.measure.plan import choose, conflicts
from kernel_advisor.measure.session import _by_preparation_cost
from kernel_advisor.measure.trials import Trial
from kernel_advisor.recommend.engine import Finding, Recommendation
from kernel_advisor.trykernel.timing import Estimate


def faster(gain: float) -> Outcome:
    speed = 1 / (1 - gain)  # gain 0.5 of the step is a 2× speedup
    return Outcome("passed", speedup=Estimate(speed, speed * 0.95, speed * 1.05), gain_frac=gain, verdict="faster")


def no_difference() -> Outcome:
    return Outcome("passed", speedup=Estimate(1.0, 0.97, 1.03), gain_frac=0.0, verdict="no measurable difference")


def test_plan_takes_faster_actions_in_ladder_order():
    outcomes = {"compile": faster(0.6), "sdpa": faster(0.2), "rms_norm_module": faster(0.05),
                "channels_last": no_difference(), "pad_gemm": Outcome("failed-gate", "output: error")}
    # library rungs first (sdpa, then rms_norm by gain), compile last; untimed or unfaster ones left out
    assert choose(outcomes) == ["sdpa", "rms_norm_module", "compile"]


@pytest.mark.parametrize("a,b,clash", [
    ("compile", "compile:reduce-overhead", True),  # one compile mode per plan
    ("kernel:triton.rms_norm", "compile", True),  # a kernel's launcher would break the graph
    ("compile", "kernel:triton.softmax", True),
    ("bf16_autocast", "compile", False),
    ("sdpa", "rms_norm_module", False),
])
def test_conflicts(a, b, clash):
    assert conflicts(get_action(a), get_action(b)) is clash


def test_plan_keeps_the_better_of_two_conflicting_actions():
    outcomes = {"compile": faster(0.3), "compile:max-autotune-no-cudagraphs": faster(0.35),
                "kernel:triton.rms_norm": faster(0.1)}
    assert choose(outcomes) == ["compile:max-autotune-no-cudagraphs"]


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
    from kernel_advisor.measure.advice import _outcome_for

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
    # the plan takes the same mode: never the one the recommendation passed over
    assert [a for a in choose({**outcomes, "sdpa": faster(0.3)}) if a.startswith("compile")] == \
        ([expected] if outcomes[expected].verdict == "faster" else [])


def test_the_graph_mode_is_measured_beside_compile_on_cuda_only():
    assert refinements_to_measure(["sdpa", "compile"], "cuda") == ["compile:reduce-overhead"]
    assert refinements_to_measure(["compile", "compile:reduce-overhead"], "cuda") == []
    assert refinements_to_measure(["compile", "none"], "cpu") == []


def test_credit_note_names_both_measurements():
    outcomes = {"compile": no_difference(), "compile:reduce-overhead": timed(1.41, 0.03)}
    assert credit_note("compile", "compile:reduce-overhead", outcomes) == (
        "measured as compile:reduce-overhead: 1.41× [1.38–1.44], against compile's 1× [0.97–1.03]")


def test_an_action_that_does_not_stack_is_left_out_and_its_group_refilled(monkeypatch):
    # float8:compile measured best of the compile group, but over sdpa's swapped forwards it no
    # longer applies: the plan is chosen again without it and compile:reduce-overhead takes the slot.
    from kernel_advisor.measure import plan as plan_mod

    tried = []

    def stack(loaded, mode, names):
        tried.append(list(names))
        if "float8:compile" in names:
            return plan_mod.Trial("plan", outcome=Outcome("error", "module forwards are swapped")), "float8:compile"
        return plan_mod.Trial("plan"), None

    monkeypatch.setattr(plan_mod, "_stack", stack)
    outcomes = {"sdpa": timed(2.85, 0.01), "rms_norm_module": timed(1.076, 0.002),
                "float8:compile": timed(2.45, 0.01), "compile:reduce-overhead": timed(2.34, 0.01),
                "compile": timed(2.31, 0.01)}
    prepared = plan_mod.prepare_best_plan(None, "inference", outcomes)
    assert tried == [["sdpa", "rms_norm_module", "float8:compile"],
                     ["sdpa", "rms_norm_module", "compile:reduce-overhead"]]
    assert prepared.names == ["sdpa", "rms_norm_module", "compile:reduce-overhead"]
    assert plan_mod.left_out_note(prepared.left_out) == "float8:compile left out: module forwards are swapped"


def test_slow_to_prepare_actions_are_gated_and_timed_after_the_others():
    # max-autotune benchmarks every GEMM shape while it compiles: under a --budget-s it must give
    # way at the end rather than use up the time the quick actions need to be timed
    trials = [Trial(n) for n in ("compile:max-autotune-no-cudagraphs", "sdpa", "plan", "compile")]
    quick, slow = _by_preparation_cost(trials)
    assert [t.name for t in quick] == ["sdpa", "plan", "compile"]
    assert [t.name for t in slow] == ["compile:max-autotune-no-cudagraphs"]
    assert _by_preparation_cost(trials[1:2]) == [trials[1:2]]
