"""Noisy machines: the causes detected (collect/noise.py), the warning, the adaptive windows, and
recommend never ranking a finding on a saving the step's own noise could hide."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time

import pytest

from kernel_advisor.collect.noise import (OVERSUBSCRIBED, PROFILED_SPREAD, PROFILER_OVERHEAD, STEP_INTERVAL, Load,
                                          detect_noise, noise_warning, other_runnable_now, step_noise_s,
                                          step_too_wide, within_noise)
from kernel_advisor.collect.step_time import Ratio, median_step_time, step_time_of
from kernel_advisor.recommend.engine import Recommendation, rank_findings
from kernel_advisor.recommend.evidence import run_context
from kernel_advisor.recommend.gain import Bucket
from kernel_advisor.render.profile_render import run_warnings

QUIET_STEPS = [0.010, 0.0101, 0.0099, 0.0100, 0.0102, 0.0098]
QUIET_LOAD = Load(cores=2, torch_threads=1, other_runnable=0.0, samples=5)


def _noise(step_times=QUIET_STEPS, profiled=QUIET_STEPS, overhead=1.2, load=QUIET_LOAD):
    return detect_noise(median_step_time(step_times, "back-to-back"), profiled, Ratio(overhead, None, None), load)


def test_a_quiet_machine_has_no_causes():
    noise = _noise()
    assert noise.causes == () and not noise.noisy
    assert noise_warning({"noise": noise.to_json()}) is None


@pytest.mark.parametrize("kwargs, cause", [
    ({"step_times": [0.010, 0.035, 0.026, 0.535, 0.030, 0.028]}, STEP_INTERVAL),
    ({"profiled": [0.010, 0.011, 0.040]}, PROFILED_SPREAD),
    ({"overhead": 8.2}, PROFILER_OVERHEAD),
    ({"overhead": 0.5}, PROFILER_OVERHEAD),
    ({"load": Load(cores=2, torch_threads=2, other_runnable=4.0, samples=9)}, OVERSUBSCRIBED),
])
def test_each_cause_is_detected_alone(kwargs, cause):
    assert _noise(**kwargs).causes == (cause,)


@pytest.mark.parametrize("overhead", [0.8, 3.0])
def test_overhead_at_the_limits_is_not_noise(overhead):
    assert _noise(overhead=overhead).causes == ()


def test_the_warning_is_one_line_with_causes_figures_and_the_fix():
    noise = _noise(step_times=[0.010, 0.035, 0.026, 0.535, 0.030, 0.028], overhead=8.2,
                   load=Load(cores=2, torch_threads=2, other_runnable=1.0, samples=9))
    doc = json.loads(json.dumps(noise.to_json(), allow_nan=False))  # strict JSON
    line = noise_warning({"noise": doc})
    assert "\n" not in line
    assert "profiler overhead 8.20×, outside 0.8–3×" in line
    assert "3 runnable threads on 2 cores" in line
    assert line.endswith("rerun with --threads 1 or on a quieter machine")
    assert doc["thresholds"]["step_interval_frac"] == 0.25 and doc["causes"][-1] == OVERSUBSCRIBED
    assert run_warnings({"noise": doc})[0] == line


def test_noise_in_run_json_of_an_older_run_is_absent_and_silent():
    assert noise_warning({}) is None and noise_warning({"noise": None}) is None


@pytest.mark.parametrize("times, wide", [(QUIET_STEPS, False), ([0.01, 0.02, 0.01, 0.05, 0.011, 0.03], True),
                                         ([0.01], False)])
def test_step_too_wide_drives_the_adaptive_windows(times, wide):
    assert step_too_wide(times) is wide


def test_runnable_threads_of_others_from_proc(tmp_path):
    (tmp_path / "stat").write_text("cpu  1 2 3\nprocs_running 7\nprocs_blocked 0\n")
    tasks = tmp_path / "self" / "task"
    for tid, state in ((1, "R"), (2, "S"), (3, "R")):
        (tasks / str(tid)).mkdir(parents=True)
        (tasks / str(tid) / "stat").write_text(f"{tid} (python3 (x) y) {state} 1 2 3\n")
    assert other_runnable_now(tmp_path) == 5
    assert other_runnable_now(tmp_path / "missing") is None


@pytest.mark.parametrize("cores, other, threads", [(2, 0.0, 2), (2, 1.0, 1), (2, 4.0, 1), (16, 3.0, 13)])
def test_threads_that_fit(cores, other, threads):
    assert Load(cores, 4, other, 3).threads_that_fit() == threads


# ---------------------------------------------------------------- ranking never rests on noise

# A busy machine's back-to-back windows: median 30 ms, interval reaching 10 ms below it.
NOISY_WINDOWS = [0.026, 0.035, 0.030, 0.020, 0.029, 0.031, 0.045, 0.024, 0.033, 0.028, 0.040]


def _rec(rule_id, saving_s, tier="library"):
    return Recommendation(rule_id=rule_id, title=rule_id, tier=tier, scope="op", subject=f"row:{rule_id}",
                          label="", message="", saving_per_step_s=saving_s, saving_pct=None,
                          row_saving_per_step_s={Bucket(f"row:{rule_id}"): saving_s})


def _noisy_ctx():
    return run_context({"steps": 5, "loop_step_s": NOISY_WINDOWS})


def test_the_noisy_step_has_a_noise_band():
    ctx = _noisy_ctx()
    step = step_time_of({"loop_step_s": NOISY_WINDOWS})
    assert ctx.step_noise_s == pytest.approx(step.value_s - step.low_s) and ctx.step_noise_s > 0.002


@pytest.mark.parametrize("noise_s, saving_s, within", [(0.004, 0.004, True), (0.004, 0.0041, False),
                                                       (0.0, 0.0001, False), (0.004, None, False)])
def test_within_noise(noise_s, saving_s, within):
    assert within_noise(saving_s, noise_s) is within


def test_a_saving_inside_the_step_noise_never_ranks_above_a_solid_one():
    ctx = _noisy_ctx()
    noise = ctx.step_noise_s
    # "cheap" is a flag on the cheapest rung whose saving nearly ties "solid"'s, which would put
    # it first; but its saving sits inside the noise while "solid"'s clears it.
    recs = [_rec("solid", noise * 1.05, tier="compile"), _rec("cheap", noise * 0.99), _rec("tiny", noise * 0.2)]
    ranked = rank_findings(recs, [], ctx)
    assert [(f.rule_id, f.within_noise) for f in ranked] == [("solid", False), ("cheap", True), ("tiny", True)]
    assert [f.rank for f in ranked] == [1, 2, 3]


def test_a_quiet_step_ranks_as_before():
    ctx = run_context({"steps": 5, "loop_step_s": QUIET_STEPS})
    recs = [_rec("solid", 0.0021, tier="compile"), _rec("cheap", 0.0020)]
    assert [f.rule_id for f in rank_findings(recs, [], ctx)] == ["cheap", "solid"]  # the near tie, cheaper first
    assert step_noise_s(step_time_of({"loop_step_s": [0.01]})) == 0.0  # one window: no interval, no band


def test_recommendations_json_marks_findings_within_noise():
    from kernel_advisor.recommend.report import Report
    from kernel_advisor.recommend.report import recommendations_json

    ctx = _noisy_ctx()
    findings = rank_findings([_rec("solid", ctx.step_noise_s * 2), _rec("tiny", ctx.step_noise_s / 2)], [], ctx)
    report = Report(ctx=ctx, findings=tuple(findings), suppressed=(), hotspots=(), row_saving_per_step_s={},
                    total_saving_per_step_s=0.0, total_saving_pct=0.0, rule_sources=(), compile_report=None,
                    run_meta={})
    doc = recommendations_json(report)
    assert [f["within_noise"] for f in doc["findings"]] == [False, True]
    assert doc["step_noise_s"] == pytest.approx(ctx.step_noise_s)


# ---------------------------------------------------------------- a real profile on a busy machine

BUSY_SCRIPT = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end:\n    pass\n"


@pytest.mark.slow
def test_a_profile_with_twice_as_many_busy_threads_as_cores_warns(tmp_path):
    torch = pytest.importorskip("torch")
    import kernel_advisor as ka

    cores = len(os.sched_getaffinity(0))
    # Each busy loop ends by itself after 60 s, so a crashed test leaves nothing spinning for long.
    busy = [subprocess.Popen([sys.executable, "-c", BUSY_SCRIPT.format(s=60)]) for _ in range(2 * cores)]
    try:
        time.sleep(0.3)  # let the loops start before the steps are timed
        model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256))
        run = ka.profile(model, [torch.randn(64, 256)], device="cpu", steps=3, warmup=1, out=tmp_path / "run")
    finally:
        for p in busy:
            p.kill()
            p.wait()
    noise = run.meta["noise"]
    assert OVERSUBSCRIBED in noise["causes"], noise
    assert noise["load"]["other_runnable"] >= cores
    assert noise["extra_windows"] > 0  # more windows were timed
    assert len(run.meta["loop_step_s"]) == 3 + noise["extra_windows"]
    lines = [w for w in ka.warnings(run) if "--threads" in w]
    assert len(lines) == 1 and "cores" in lines[0]
    json.dumps(run.meta, allow_nan=False)
    assert all(math.isfinite(x) for x in run.meta["loop_step_s"])
