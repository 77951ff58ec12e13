"""The one step time (collect/step_time.py): median, order-statistic interval, steady state, overhead."""
import json
import math

import pytest

from kernel_advisor.collect.step_time import (
    DRIFT_RATIO_LIMIT, Ratio, SteadyState, StepTime, drift_ratio, intervals_overlap, is_drifting,
    median_interval_coverage, median_interval_s, overhead_of, overhead_ratio, steady_state_of,
    steady_state_warning, step_time_estimate, step_time_of, time_until_steady, trace_span_step_time)
from kernel_advisor.render.profile_render import overhead_text, step_text


def test_coverage_is_the_binomial_sum():
    # [x(1), x(n)] misses the median only when all n draws fall on one side: 1 − 2 / 2^n
    assert median_interval_coverage(5, 1) == pytest.approx(1 - 2 / 32)  # 0.9375
    assert median_interval_coverage(6, 1) == pytest.approx(1 - 2 / 64)  # 0.96875
    # n = 10, j = 2: 1 − 2·(C(10,0) + C(10,1)) / 1024 = 1 − 22/1024
    assert median_interval_coverage(10, 2) == pytest.approx(1 - 22 / 1024)
    # j = 3: 1 − 2·(1 + 10 + 45) / 1024 = 0.890625, below 95 %
    assert median_interval_coverage(10, 3) == pytest.approx(0.890625)
    assert median_interval_coverage(1, 1) == 0.0 and median_interval_coverage(4, 3) == 0.0


def test_interval_is_the_narrowest_reaching_95_percent():
    times = [0.010, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009]  # order does not matter
    low, high, coverage = median_interval_s(times)
    assert (low, high) == (0.002, 0.009)  # x(2), x(9): j = 2 is the largest j still ≥ 95 %
    assert coverage == pytest.approx(1 - 22 / 1024)


def test_few_steps_get_min_max_and_say_how_little_it_covers():
    low, high, coverage = median_interval_s([3.0, 1.0, 2.0])
    assert (low, high) == (1.0, 3.0) and coverage == pytest.approx(0.75)


def test_estimate_prefers_unprofiled_steps():
    est = step_time_estimate([0.5, 0.6, 0.7], [0.1, 0.3, 0.2])
    assert (est.value_s, est.low_s, est.high_s, est.source, est.steps) == (0.2, 0.1, 0.3, "unprofiled", 3)
    assert est.basis() == "median of 3 unprofiled steps"
    only_profiled = step_time_estimate([0.5, 0.6, 0.7], [])
    assert only_profiled.source == "profiled" and only_profiled.value_s == 0.6
    assert step_time_estimate([], None) is None
    one = step_time_estimate([0.4], None)
    assert one.value_s == 0.4 and not one.has_interval() and one.basis() == "median of 1 profiled step"


def test_trace_span_step_time_shares_the_span():
    st = trace_span_step_time(0.9, 3)
    assert st.value_s == pytest.approx(0.3) and st.low_s is None and st.source == "trace-span"
    assert st.basis() == "whole trace / 3 steps (no step markers)"


def test_run_json_step_s_wins_and_older_runs_fall_back():
    recorded = {"value": 0.367, "low": 0.36, "high": 0.372, "source": "unprofiled", "steps": 10,
                "confidence": 0.978}
    meta = {"step_s": recorded, "step_wall_s": [1.0, 1.0], "unprofiled_step_wall_s": [2.0, 2.0]}
    assert step_time_of(meta).to_json() == recorded
    older = {"step_wall_s": [0.5, 0.7, 0.6], "unprofiled_step_wall_s": [0.4, 0.45, 0.5]}
    assert step_time_of(older) == step_time_estimate(older["step_wall_s"], older["unprofiled_step_wall_s"])
    assert step_time_of({"step_wall_s": [], "unprofiled_step_wall_s": []}) is None
    # a step_s that is not one (NaN written by hand, unknown source) is ignored, not trusted
    assert step_time_of({**older, "step_s": {**recorded, "value": math.nan}}).value_s == 0.45
    assert step_time_of({**older, "step_s": {**recorded, "source": "guess"}}).value_s == 0.45


def test_step_time_json_is_strict():
    text = json.dumps(step_time_estimate([0.1], None).to_json(), allow_nan=False)
    assert json.loads(text)["low"] is None


def test_drift_compares_first_and_last_thirds():
    # 9 steps: first third median 3.0, last third median 1.0
    times = [3.0, 2.9, 3.1, 2.0, 2.0, 2.0, 1.0, 1.1, 0.9]
    assert drift_ratio(times) == pytest.approx(3.0)
    assert is_drifting(times)
    assert not is_drifting([1.0, 1.5, 1.19])  # 1.19×: at the limit, not above it
    assert drift_ratio([1.0, 2.0]) is None and not is_drifting([5.0, 1.0])  # too few to tell
    assert not is_drifting([1.0, 1.0, 2.0])  # getting slower is not warm-up


def _rounds(*rounds):
    it = iter(rounds)
    return lambda: list(next(it))


def test_drifting_round_counts_as_warmup_and_is_timed_again():
    times, state = time_until_steady(_rounds([3.0, 2.0, 1.0], [1.0, 1.1, 1.0]))
    assert times == [1.0, 1.1, 1.0]
    assert state == SteadyState(extra_warmup_steps=3, first_drift_ratio=3.0, final_drift_ratio=1.0, steady=True)
    assert steady_state_warning(state) == (
        f"step times drifted (first third 3.00× the last third, limit {DRIFT_RATIO_LIMIT}×): warm-up "
        "extended by 3 steps until they settled")


def test_extra_warmup_stops_at_the_cap_and_says_the_steps_never_settled():
    drifting = [2.0, 1.5, 1.0]
    times, state = time_until_steady(_rounds(*[drifting] * 5), max_extra_rounds=3)
    assert times == drifting and state.extra_warmup_steps == 9 and state.steady is False
    line = steady_state_warning(state)
    assert line.startswith("step times still drift after 9 extra warm-up steps") and "raise --warmup" in line


def test_steady_steps_are_kept_and_not_warned_about():
    times, state = time_until_steady(_rounds([1.0, 1.05, 1.0]))
    assert times == [1.0, 1.05, 1.0] and state.extra_warmup_steps == 0 and state.steady is True
    assert steady_state_warning(state) is None
    assert steady_state_warning(time_until_steady(_rounds([1.0]))[1]) is None  # one step: cannot tell
    assert steady_state_of({"steady_state": state.to_json()}) == state


def test_overhead_ratio_interval_from_the_two_medians():
    profiled, unprofiled = [1.2, 1.1, 1.3], [1.0, 0.9, 1.1]
    r = overhead_ratio(profiled, unprofiled)
    assert r.value == pytest.approx(1.2 / 1.0)
    assert (r.low, r.high) == pytest.approx((1.1 / 1.1, 1.3 / 0.9))  # low_p / high_u, high_p / low_u
    assert overhead_text(r) == "1.20× [1.00–1.44]"
    assert overhead_ratio([1.0], [0.5]) == Ratio(2.0, None, None) and overhead_text(Ratio(2.0, None, None)) == "2.00×"
    assert overhead_ratio([1.0], []) is None
    assert overhead_of({"step_wall_s": profiled, "unprofiled_step_wall_s": unprofiled}) == r  # older run.json
    assert overhead_of({"profiler_overhead": r.to_json()}) == r


def test_intervals_overlap():
    a = StepTime(1.0, 0.9, 1.1, "unprofiled", 10, 0.98)
    assert intervals_overlap(a, StepTime(1.15, 1.1, 1.2, "unprofiled", 10, 0.98)) is True  # touching
    assert intervals_overlap(a, StepTime(1.3, 1.2, 1.4, "unprofiled", 10, 0.98)) is False
    assert intervals_overlap(a, trace_span_step_time(1.0, 2)) is None


def test_step_text_says_what_the_figure_is():
    st = StepTime(0.367, 0.360, 0.372, "unprofiled", 10, 0.978)
    assert step_text(st) == "step 367.00 ms [360.00 ms–372.00 ms, 98 % CI], median of 10 unprofiled steps"
    assert step_text(None) == "step –"
