"""One step time through the commands: profile writes it (steady-state check included), recommend,
report and the summary line quote it; import takes --steps and warns about what a trace lacks;
runs under 90 % modelled say which ops are not."""
import json
import statistics
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile, schedule
from typer.testing import CliRunner

import kernel_advisor.cli
from kernel_advisor.collect.rundir import load_run, resolve_run
from kernel_advisor.render.profile_render import coverage_warning, run_warnings

runner = CliRunner()


def advisor(*args):
    return runner.invoke(kernel_advisor.cli.app, [str(a) for a in args])


def warnings_of(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("advisor: warning:")]


# Step k of the process (1 = the one warm-up step) sleeps BASE_S, or SLOW_S when slow(k).
SLEEPY_MODEL = '''
import time
import torch
import torch.nn as nn

BASE_S, SLOW_S = 0.02, 0.1  # 20 ms: CPU contention of a few ms stays under the 1.2× drift limit
CALLS = [0]


def slow(k):
    return {slow}


class Model(nn.Module):
    def forward(self, x):
        CALLS[0] += 1
        time.sleep(SLOW_S if slow(CALLS[0]) else BASE_S)
        return x + 1


def get_inputs():
    return [torch.randn(4, 4)]


def get_init_inputs():
    return []
'''


def sleepy_model(tmp_path: Path, slow: str) -> Path:
    path = tmp_path / "sleepy.py"
    path.write_text(SLEEPY_MODEL.replace("{slow}", slow))
    return path


def test_profile_extends_warmup_while_steps_drift(advisor_home, tmp_path):
    # --warmup 1 runs step 1; the first timed round is steps 2, 3, 4 = slow, slow, fast: its
    # first third is 5× its last, so it counts as warm-up and steps 5, 6, 7 (all fast) are timed.
    model = sleepy_model(tmp_path, "k in (2, 3)")
    res = advisor("profile", model, "--device", "cpu", "--steps", 3, "--warmup", 1)
    assert res.exit_code == 0, res.output
    meta = load_run(resolve_run()).meta
    assert meta["steady_state"]["extra_warmup_steps"] == 3 and meta["steady_state"]["steady"] is True
    assert meta["steady_state"]["first_drift_ratio"] > 3
    step = meta["step_s"]
    # the step every command quotes: 3 windows of back-to-back steps, timed once the steps settled
    # (more than 3 windows when the machine is busy: the noise check times more)
    n = step["steps"]
    assert step["source"] == "back-to-back" and n >= 3 and meta["loop_window_steps"] >= 3
    assert step["value"] == pytest.approx(statistics.median(meta["loop_step_s"]))
    assert step["low"] <= step["value"] <= step["high"] < 0.08  # the slow warm-up steps are not in it
    assert f"median of {n} windows of back-to-back steps" in res.stdout
    assert any("warm-up extended by 3 steps until they settled" in w for w in warnings_of(res))
    assert meta["profiler_overhead"]["low"] <= meta["profiler_overhead"]["value"] <= meta["profiler_overhead"]["high"]


def test_profile_warns_when_steps_never_settle(advisor_home, tmp_path):
    model = sleepy_model(tmp_path, "k % 3 == 2")  # every round's first step is slow
    res = advisor("profile", model, "--device", "cpu", "--steps", 3, "--warmup", 1, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    state = doc["run"]["steady_state"]
    assert state["extra_warmup_steps"] == 9 and state["steady"] is False  # the cap: 3 more rounds
    assert any("still drift after 9 extra warm-up steps" in w for w in warnings_of(res))
    assert any("still drift" in w for w in doc["warnings"])


@pytest.fixture
def steady_run(advisor_home, tmp_path):
    res = advisor("profile", sleepy_model(tmp_path, "False"), "--device", "cpu", "--steps", 3, "--warmup", 1)
    assert res.exit_code == 0, res.output
    assert not any("drift" in w for w in warnings_of(res))
    return resolve_run()


def test_recommend_and_report_quote_the_same_step(steady_run):
    step = load_run(steady_run).meta["step_s"]
    res = advisor("recommend", steady_run, "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    basis = f"median of {step['steps']} windows of back-to-back steps"
    assert doc["step_s"] == pytest.approx(step["value"]) and doc["step_basis"] == basis
    md = advisor("recommend", steady_run, "--format", "markdown").stdout
    assert f"step {step['value'] * 1e3:.3f} ms, {basis}." in md
    res = advisor("report", steady_run, "-o", steady_run / "r.html")
    assert res.exit_code == 0, res.output
    html = (steady_run / "r.html").read_text()
    assert f"step time ({basis})" in html and "without profiler" not in html
    assert "profiler overhead (profiled / unprofiled median)" in html


def test_recommend_reads_step_s_before_the_step_lists(steady_run):
    path = steady_run / "run.json"
    meta = json.loads(path.read_text())
    meta["step_s"] = {**meta["step_s"], "value": 0.25, "low": 0.2, "high": 0.3}
    path.write_text(json.dumps(meta))
    doc = json.loads(advisor("recommend", steady_run, "--format", "json").stdout)
    assert doc["step_s"] == 0.25


# ---------------------------------------------------------------- import


def _trace(path: Path, steps: int, record_shapes: bool, scheduled: bool) -> Path:
    model, x = torch.nn.Linear(16, 16), torch.randn(8, 16)
    if scheduled:
        with profile(activities=[ProfilerActivity.CPU], record_shapes=record_shapes,
                     schedule=schedule(wait=0, warmup=1, active=steps),
                     on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
            for _ in range(steps + 1):  # the first is the schedule's warm-up, not in the trace
                model(x)
                prof.step()
    else:
        with profile(activities=[ProfilerActivity.CPU], record_shapes=record_shapes) as prof:
            for _ in range(steps):
                model(x)
        prof.export_chrome_trace(str(path))
    return path


def test_import_without_markers_or_shapes_says_what_is_missing(advisor_home, tmp_path):
    res = advisor("import", _trace(tmp_path / "bare.json", 3, record_shapes=False, scheduled=False))
    assert res.exit_code == 0, res.output
    lines = warnings_of(res)
    assert any("no ProfilerStep markers" in w and "totals over the whole trace" in w and "--steps N" in w
               for w in lines)
    assert any("no input shapes" in w and "record_shapes=True" in w and "schedule" in w for w in lines)
    assert not any("of device time is modelled" in w for w in lines)  # the shapes line already says why
    meta = load_run(resolve_run()).meta
    assert meta["shapes_recorded"] is False and meta["step_markers"] is None
    assert meta["coverage"]["modelled_time_pct"] == 0.0


def test_import_steps_divides_an_unmarked_trace(advisor_home, tmp_path):
    trace = _trace(tmp_path / "three.json", 3, record_shapes=True, scheduled=False)
    res = advisor("import", trace, "--steps", 3)
    assert res.exit_code == 0, res.output
    assert any("taken as 3 steps (--steps 3)" in w for w in warnings_of(res))
    run = load_run(resolve_run())
    assert run.meta["steps"] == 3 and run.meta["args"]["steps"] == 3
    step = run.meta["step_s"]
    assert step["source"] == "trace-span" and step["low"] is None
    assert step["value"] == pytest.approx(run.meta["trace_step_wall_s"][0] / 3)
    linear = run.ops[run.ops["name"] == "aten::linear"].iloc[0]
    assert linear["calls"] == 3 and linear["device_time_per_step_s"] == pytest.approx(linear["device_time_total_s"] / 3)
    assert "whole trace / 3 steps (no step markers)" in res.stdout


def test_import_steps_keeps_the_last_marked_steps(advisor_home, tmp_path):
    trace = _trace(tmp_path / "marked.json", 3, record_shapes=True, scheduled=True)
    res = advisor("import", trace)
    assert res.exit_code == 0, res.output
    assert not any("markers" in w for w in warnings_of(res))
    full = load_run(resolve_run())
    assert full.meta["steps"] == 3 and full.meta["step_markers"] == "ProfilerStep#N"
    res = advisor("import", trace, "--steps", 2)
    assert res.exit_code == 0, res.output
    last = load_run(resolve_run())
    assert last.meta["steps"] == 2 and last.meta["step_s"]["steps"] == 2
    assert last.meta["step_s"]["source"] == "profiled"
    assert int(last.ops.loc[last.ops["name"] == "aten::linear", "calls"].sum()) == 2
    assert last.meta["trace_step_wall_s"] == full.meta["trace_step_wall_s"][1:]
    res = advisor("import", trace, "--steps", 4)
    assert res.exit_code == 1 and "marks only 3 step(s)" in res.stderr


def _x(name, ts, dur, **args):
    return {"ph": "X", "cat": "cpu_op" if "::" in name and not name.startswith("Profiler") else "user_annotation",
            "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur, "args": args}


def test_import_under_90_percent_modelled_names_the_unmodelled_ops(advisor_home, tmp_path):
    events = []
    for step, t0 in enumerate((0, 1000)):
        events += [_x(f"ProfilerStep#{step}", t0, 500),
                   _x("aten::add", t0 + 10, 30, **{"Input Dims": [[64], [64]], "Input type": ["float", "float"]}),
                   _x("mylib::mystery", t0 + 50, 200, **{"Input Dims": [[64]], "Input type": ["float"]}),
                   _x("mylib::oddity", t0 + 300, 70, **{"Input Dims": [[64]], "Input type": ["float"]})]
    path = tmp_path / "mystery.json"
    path.write_text(json.dumps({"schemaVersion": 1, "traceEvents": events}))
    res = advisor("import", path)
    assert res.exit_code == 0, res.output
    # modelled: aten::add 30 of 300 µs = 10 %; mystery 200/300 = 67 %, oddity 70/300 = 23 %
    line = next(w for w in warnings_of(res) if "modelled" in w)
    assert "only 10% of device time is modelled (below 90 %)" in line
    assert "mylib::mystery (67%), mylib::oddity (23%)" in line


def test_coverage_warning_thresholds_and_more():
    meta = {"total_device_time_s": 1.0, "coverage": {"modelled_time_pct": 89.9, "unmodelled": [
        {"name": f"op{i}", "device_time_total_s": 0.02} for i in range(5)]}}
    assert coverage_warning(meta).endswith("no FLOPs, bytes or roofline for op0 (2%), op1 (2%), op2 (2%), +2 more, "
                                           "so no verdict or gain estimate either")
    assert coverage_warning({**meta, "coverage": {"modelled_time_pct": 90.0, "unmodelled": []}}) is None
    assert run_warnings({"coverage": {"modelled_time_pct": 100.0}}) == []


def test_api_run_exposes_the_step_time_and_warnings(advisor_home, tmp_path):
    import kernel_advisor as ka

    run = ka.import_trace(_trace(tmp_path / "api.json", 2, record_shapes=True, scheduled=False),
                          out=tmp_path / "api-run", steps=2)
    assert run.meta["steps"] == 2 and run.step_time.source == "trace-span" and run.step_time.steps == 2
    assert any("taken as 2 steps" in w for w in ka.warnings(run))
