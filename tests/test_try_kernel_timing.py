"""Bootstrap statistics, verdicts, interleaving and per-op profiler attribution."""
import contextlib

import pytest
import torch
from torch.profiler import record_function

from kernel_advisor.trykernel.timing import (Estimate, TimedVariant, interleaved_times_s, median_ci,
                                             profiled_op_times, speedup_ci, verdict)


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
        return TimedVariant(name, activate, lambda: None)

    times = interleaved_times_s([variant("a"), variant("b"), variant("c")], reps=3, warmup=1,
                                device=torch.device("cpu"))
    assert order[:3] == ["a", "b", "c"]  # warm-up, one activation per variant
    assert order[3:] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]  # round r starts at variant r
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3, "c": 3}


def test_profiled_op_time_counts_only_the_outermost_named_event():
    x = torch.randn(64, 257)

    def step():
        with record_function("try_kernel::demo"):
            for _ in range(3):
                torch.softmax(x, -1)
        return torch.exp(x)

    names = {"aten::softmax", "aten::_softmax"}
    t = profiled_op_times(step, contextlib.nullcontext, names, steps=2, device=torch.device("cpu"))
    assert t.per_name_s["aten::softmax"] > 0
    assert t.per_name_s["aten::_softmax"] == 0.0  # inside aten::softmax: counted there once
    assert t.total_s >= t.per_name_s["aten::softmax"]
    ranged = profiled_op_times(step, contextlib.nullcontext, names | {"try_kernel::demo"}, 2, torch.device("cpu"))
    assert ranged.per_name_s["aten::softmax"] == 0.0  # now inside the named range
    assert ranged.per_name_s["try_kernel::demo"] > 0


def test_each_variant_runs_inside_its_own_nvtx_range(monkeypatch):
    import contextlib

    from kernel_advisor.trykernel import timing

    opened = []

    @contextlib.contextmanager
    def record(name):
        opened.append(name)
        yield

    monkeypatch.setattr(timing, "nvtx_range", record)
    variants = [timing.TimedVariant(n, contextlib.nullcontext, lambda: None) for n in ("eager", "triton.softmax")]
    timing.interleaved_times_s(variants, reps=2, warmup=1, device=torch.device("cpu"))
    # one warm-up range per variant, then one range per variant per round: 2 + 2*2 = 6
    assert opened.count("advisor/try-kernel/warmup/eager") == 1
    assert opened.count("advisor/try-kernel/eager") == 2
    assert opened.count("advisor/try-kernel/triton.softmax") == 2 and len(opened) == 6
