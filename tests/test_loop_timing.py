"""The user's loop regime: back-to-back windows, interleaving, window sizing, bootstrap statistics."""
import contextlib

import pytest
import torch

from kernel_advisor.collect import loop_timing
from kernel_advisor.collect.loop_timing import (BACK_TO_BACK, SYNCHRONIZED, Estimate, TimedStep, autorange_steps,
                                                interleaved_windows_s, median_ci, speedup_ci, steps_per_window,
                                                verdict, window_s)

CPU = torch.device("cpu")


def test_median_ci_hand_worked():
    e = median_ci([1.0, 2.0, 3.0, 4.0, 100.0])
    assert e.value == 3.0  # the outlier does not move the median
    assert 1.0 <= e.low <= 3.0 <= e.high <= 100.0


def test_speedup_of_a_constant_twice_as_fast_variant():
    e = speedup_ci([2e-3] * 9, [1e-3] * 9)  # 2 ms / 1 ms
    assert (e.value, e.low, e.high) == (2.0, 2.0, 2.0)
    assert verdict(e) == "faster"
    assert verdict(speedup_ci([1e-3] * 9, [4e-3] * 9)) == "slower"  # 1 / 4 = 0.25


def test_overlapping_times_give_no_measurable_difference():
    base = [1.0, 1.2, 0.8, 1.1, 0.9, 1.05, 0.95]
    other = [0.9, 1.1, 1.2, 0.8, 1.05, 1.0, 0.95]  # same values, another order: ratio of medians 1
    e = speedup_ci(base, other)
    assert e.value == pytest.approx(1.0)
    assert e.low < 1.0 < e.high
    assert verdict(e) == "no measurable difference"


def test_verdict_boundaries():
    assert verdict(Estimate(1.2, 1.01, 1.4)) == "faster"
    assert verdict(Estimate(0.8, 0.7, 0.99)) == "slower"
    assert verdict(Estimate(1.0, 1.0, 1.0)) == "no measurable difference"


def test_rounds_interleave_and_rotate_the_first_variant():
    order = []

    def variant(name):
        @contextlib.contextmanager
        def activate():
            order.append(name)
            yield
        return TimedStep(name, activate, lambda: None)

    times = interleaved_windows_s([variant("a"), variant("b"), variant("c")], windows=3, steps=2, warmup=1,
                                  device=torch.device("cpu"))
    assert order[:3] == ["a", "b", "c"]  # warm-up, one activation per variant
    assert order[3:] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]  # round r starts at variant r
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3, "c": 3}


def test_each_variant_runs_inside_its_own_nvtx_range(monkeypatch):
    opened = []

    @contextlib.contextmanager
    def record(name):
        opened.append(name)
        yield

    monkeypatch.setattr(loop_timing, "nvtx_range", record)
    variants = [TimedStep(n, contextlib.nullcontext, lambda: None) for n in ("eager", "triton.softmax")]
    interleaved_windows_s(variants, windows=2, steps=3, warmup=1, device=CPU)
    # one warm-up range per variant, then one range per variant per window: 2 + 2*2 = 6
    assert opened.count("advisor/warmup/eager") == 1
    assert opened.count(f"advisor/{BACK_TO_BACK}/eager") == 2
    assert opened.count(f"advisor/{BACK_TO_BACK}/triton.softmax") == 2 and len(opened) == 6


class Clock:
    """A step of fixed host cost on a fake clock: time.perf_counter advances only in steps."""

    def __init__(self, monkeypatch, step_s: float) -> None:
        self.now, self.calls, self.step_s = 0.0, 0, step_s
        monkeypatch.setattr(loop_timing.time, "perf_counter", lambda: self.now)

    def step(self) -> None:
        self.calls += 1
        self.now += self.step_s


def test_a_window_is_its_steps_between_two_synchronizes(monkeypatch):
    clock = Clock(monkeypatch, 0.25e-3)
    assert window_s(clock.step, 8, CPU) == pytest.approx(0.25e-3)  # 8 steps of 0.25 ms: 2 ms / 8
    assert clock.calls == 8


def test_synchronized_regime_times_one_step_per_window(monkeypatch):
    clock = Clock(monkeypatch, 1e-3)
    times = interleaved_windows_s([TimedStep("a", contextlib.nullcontext, clock.step)], windows=4, steps=10,
                                  warmup=0, device=CPU, regime=SYNCHRONIZED)
    assert times["a"] == pytest.approx([1e-3] * 4) and clock.calls == 4


@pytest.mark.parametrize("step_s,expected", [
    (1e-3, 20),  # 20 ms / 1 ms
    (0.3e-3, 67),  # ceil(20 / 0.3)
    (50e-3, 3),  # never fewer than a pipeline keeps in flight
    (1e-6, 200),  # capped
    (float("nan"), 3), (0.0, 3),
])
def test_steps_per_window(step_s, expected):
    assert steps_per_window(step_s) == expected


@pytest.mark.parametrize("step_s,expected", [(1e-3, 24), (4e-3, 6), (30e-3, 3), (1e-6, 200)])
def test_autorange_doubles_the_window_until_it_lasts_20_ms(monkeypatch, step_s, expected):
    # 3, 6, 12, 24 steps: 24 × 1 ms is the first window of at least 20 ms
    clock = Clock(monkeypatch, step_s)
    assert autorange_steps(clock.step, CPU) == expected


def test_interleaving_stops_after_the_round_the_deadline_passed(monkeypatch):
    clock = Clock(monkeypatch, 1e-3)
    monkeypatch.setattr(loop_timing.time, "monotonic", lambda: clock.now)
    times = interleaved_windows_s([TimedStep("a", contextlib.nullcontext, clock.step)], windows=50, steps=10,
                                  warmup=0, device=CPU, deadline_s=0.025)
    assert len(times["a"]) == 3  # 10 ms a window: past 25 ms after the third
