"""The experiment engine on CPU: configurations, the search space, the budget, the journal, the
plan as code, train steps with an optimizer."""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import time

import pytest
import torch
import torch.nn as nn
from test_actions import NaiveAttention, loaded_of, seeded

from kernel_advisor.collect.interrupts import OutOfTime, alarm_after
from kernel_advisor.collect.loop_timing import Estimate
from kernel_advisor.collect.runner import make_step
from kernel_advisor.errors import UserInputError
from kernel_advisor.experiment import engine, search
from kernel_advisor.experiment.variant import MARK, PlannedModel, apply_plan, write_plan_module
from kernel_advisor.experiment.trial import FINAL_RESERVE_FRAC, FIRST_COMPILE_MIN_S, Budget
from kernel_advisor.experiment.search import SearchOptions
from kernel_advisor.experiment.trial import Outcome
from kernel_advisor.experiment.variant import Config, make_config
from kernel_advisor.records.experiments import ExperimentsRecord

# Each named action alone, a short timing, no compile: seconds on 2 cores.
QUICK = SearchOptions(short_windows=3, long_windows=8, warmup=1, compile_modes=(), draws=1)


def faster(speed: float) -> Outcome:
    return Outcome("passed", speedup=Estimate(speed, speed * 0.97, speed * 1.03), gain_frac=1 - 1 / speed,
                   verdict="faster")


def slower() -> Outcome:
    return Outcome("passed", speedup=Estimate(0.8, 0.75, 0.85), gain_frac=-0.25, verdict="slower")


class ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.norm = nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(2, 8)

    def forward(self, x):
        return torch.relu(self.norm(self.conv(x)))


# ---------------------------------------------------------------- configurations


@pytest.mark.parametrize("parts,actions,top", [
    (["compile", "sdpa"], ("sdpa",), "compile"),  # compile on top, whatever the order given
    (["kernel:triton.rms_norm", "channels_last"], ("channels_last", "kernel:triton.rms_norm"), ""),  # ladder order
    (["compile:max-autotune-no-cudagraphs", "kernel:cuda.softmax", "sdpa"], ("sdpa", "kernel:cuda.softmax"),
     "compile:max-autotune-no-cudagraphs"),
])
def test_a_configuration_puts_compile_on_top_and_the_rest_in_ladder_order(parts, actions, top):
    c = make_config(parts)
    assert (c.actions, c.compile) == (actions, top)
    assert c.name == " + ".join(actions + ((top,) if top else ()))


@pytest.mark.parametrize("parts", [["compile", "compile:reduce-overhead"], ["float8", "bf16_autocast"],
                                   ["float8:compile", "compile"]])
def test_conflicting_parts_make_no_configuration(parts):
    with pytest.raises(ValueError, match="cannot be combined"):
        make_config(parts)


# ---------------------------------------------------------------- the space


def test_singles_are_the_named_actions_and_every_compile_mode_of_the_device():
    loaded = loaded_of(NaiveAttention(), seeded(2, 5, 24))
    names = [c.name for c in search.singles(loaded, ["sdpa", "none", "compile", "sdpa"])]
    # CPU: no CUDA-graph mode; "none" is no action; duplicates once
    assert names == ["sdpa", "compile", "compile:max-autotune-no-cudagraphs"]
    assert [c.name for c in search.singles(loaded, ["sdpa"], modes=())] == ["sdpa"]


def test_channels_last_is_tried_wherever_the_model_holds_4d_weights():
    loaded = loaded_of(ConvNet(), seeded(2, 3, 9, 7))
    assert "channels_last" in [c.name for c in search.singles(loaded, [], modes=())]
    assert "channels_last" not in [c.name for c in search.singles(loaded_of(NaiveAttention(), seeded(2, 5, 24)), [])]


def test_combinations_stack_what_won_under_each_compile_mode_that_passed():
    loaded = loaded_of(ConvNet(), seeded(2, 3, 9, 7))
    singles = {make_config(["sdpa"]): faster(1.3), make_config(["rms_norm_module"]): faster(1.1),
               make_config(["channels_last"]): slower(), Config((), "compile"): faster(2.0),
               Config((), "compile:max-autotune-no-cudagraphs"): faster(2.4),
               make_config(["kernel:cuda.softmax"]): slower()}
    names = {c.name for c in search.combinations(singles, loaded)}
    assert "sdpa + rms_norm_module" in names  # the base: both library wins stacked
    assert "sdpa + rms_norm_module + compile:max-autotune-no-cudagraphs" in names
    # channels_last lost alone, but an expert still tries it under compile
    assert "channels_last + compile" in names and "sdpa + rms_norm_module + channels_last + compile" in names
    # the kernel goes inside the best compile mode as its operator, and on the base in eager
    assert "kernel:cuda.softmax + compile:max-autotune-no-cudagraphs" in names
    assert "sdpa + rms_norm_module + kernel:cuda.softmax" in names
    assert not names & {c.name for c in singles}  # nothing measured twice


# ---------------------------------------------------------------- the budget


def test_compile_costs_are_learnt_and_scaled_by_mode():
    b = Budget(100.0)
    assert b.expected_compile_s("") == 0.0
    assert b.expected_compile_s("compile") == FIRST_COMPILE_MIN_S  # unknown: started, under the alarm
    b.learn_compile("compile", 12.0)
    assert b.expected_compile_s("compile") == 12.0
    assert b.expected_compile_s("compile:max-autotune-no-cudagraphs") == 48.0  # 4 × a default compile
    assert b.exploring_left_s() == pytest.approx(100 * (1 - FINAL_RESERVE_FRAC), abs=0.5)
    assert not b.fits(90.0) and "skipped: expected to take 90 s" in b.out_of_time_reason(90.0)
    assert Budget(None).fits(1e9)


def test_the_alarm_stops_a_block_and_leaves_no_timer():
    t0 = time.monotonic()
    with pytest.raises(OutOfTime):
        with alarm_after(0.2):
            while True:
                time.sleep(0.01)
    assert time.monotonic() - t0 < 2.0
    with alarm_after(0.05):
        pass
    time.sleep(0.1)  # a timer left running would raise here


# ---------------------------------------------------------------- the search, end to end


def _search(tmp_path, names, options=QUICK, model=None, inputs=None, mode="inference"):
    loaded = loaded_of(model or NaiveAttention(d=32, heads=4), inputs or seeded(4, 17, 32))
    return engine.measure_actions(loaded, mode, names, options, run_dir=tmp_path)


def test_every_trial_is_recorded_with_its_status_and_the_record_reads_back(tmp_path):
    m = _search(tmp_path, ["sdpa", "rms_norm_module"])
    rec = ExperimentsRecord.read(tmp_path)
    assert rec.complete and not rec.interrupted
    names = [t["config"]["name"] for t in rec.trials]
    assert names[0] == "sdpa" and "rms_norm_module" in names  # rms_norm_module: not in this model
    by = {t["config"]["name"]: t for t in rec.trials}
    assert by["rms_norm_module"]["status"] == "not-applied" and by["rms_norm_module"]["windows"] == 0
    assert by["sdpa"]["status"] == "passed" and by["sdpa"]["windows"] >= QUICK.short_windows
    assert rec.regime.startswith("back-to-back") and rec.eager_step_s["value"] > 0
    assert m.outcomes["sdpa"].speedup is not None and m.eager_sync_step_s is not None
    json.loads((tmp_path / "experiments.json").read_text())  # strict: no NaN


def test_the_plan_is_the_fastest_configuration_that_measured_faster(tmp_path, monkeypatch):
    speeds = {"sdpa": 1.5, "sdpa + rms_norm_module": 1.8, "rms_norm_module": 1.2}

    def fake_time(loaded, mode, trials, windows, warmup, state, budget):
        for t in trials:
            t.windows += windows
            t.outcome = faster(speeds[t.name])

    monkeypatch.setattr(search, "_time", fake_time)
    loaded = loaded_of(nn.Sequential(nn.Linear(8, 8)), seeded(3, 8))
    monkeypatch.setattr(search, "singles", lambda loaded, names, modes: [make_config(["sdpa"]),
                                                                               make_config(["rms_norm_module"])])
    monkeypatch.setattr(search, "prepare_trial", lambda loaded, mode, config, phase, busy: search.Trial(
        config, phase, variant=_fake_variant(config)))
    monkeypatch.setattr(search, "gate_trials", lambda *a, **k: None)
    monkeypatch.setattr(search, "_learn_window", lambda *a: None)
    m = engine.measure_actions(loaded, "inference", ["sdpa", "rms_norm_module"], QUICK, run_dir=tmp_path)
    assert m.plan.actions == ("sdpa", "rms_norm_module") and m.plan.outcome.speedup.value == 1.8
    assert ExperimentsRecord.read(tmp_path).plan["config"]["name"] == "sdpa + rms_norm_module"


def _fake_variant(config):
    from kernel_advisor.actions import Variant

    return Variant(config.name, None, config.name)


def test_an_interrupted_search_leaves_a_valid_partial_record(tmp_path, monkeypatch):
    real = search.prepare_trial
    calls = []

    def interrupt_second(loaded, mode, config, phase, busy):
        calls.append(config.name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(loaded, mode, config, phase, busy)

    monkeypatch.setattr(search, "prepare_trial", interrupt_second)
    with pytest.raises(KeyboardInterrupt):
        _search(tmp_path, ["sdpa", "compile"], dataclasses.replace(QUICK, compile_modes=None))
    doc = json.loads((tmp_path / "experiments.json").read_text())
    assert doc["complete"] is False and doc["interrupted"] is True
    assert [t["config"]["name"] for t in doc["trials"]] == ["sdpa"]  # the measured part is there
    assert doc["trials"][0]["speedup"]["value"] > 0


def test_a_tight_budget_skips_what_cannot_fit_and_says_so(tmp_path):
    options = dataclasses.replace(QUICK, budget_s=6.0, compile_modes=None)
    t0 = time.monotonic()
    m = _search(tmp_path, ["sdpa"], options)
    elapsed = time.monotonic() - t0
    assert elapsed <= 6.0 * 1.1 + 1.0  # the budget, 10 %, and the reference's preparation
    rec = m.record
    untimed = [t for t in rec.trials if t["windows"] == 0]
    assert untimed and all(("skipped" in t["reason"] or "stopped" in t["reason"]) for t in untimed)


# ---------------------------------------------------------------- the plan as code


def test_the_emitted_plan_applies_the_same_configuration(tmp_path):
    torch.manual_seed(0)
    model = NaiveAttention(d=32, heads=4).eval()
    x = seeded(2, 9, 32)(0)
    path = write_plan_module(tmp_path / "plan.py", ("sdpa",), "inference", 'summary with """ and \x1b[31m')
    text = path.read_text()
    assert text.startswith(MARK) and "\x1b" not in text
    spec = importlib.util.spec_from_file_location("plan_under_test", path)
    plan = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plan)
    planned = plan.apply_plan(model, x)
    assert isinstance(planned, PlannedModel) and plan.PLAN == ("sdpa",)
    with torch.no_grad():
        torch.testing.assert_close(planned(*x), model(*x), rtol=1e-5, atol=1e-5)
    write_plan_module(path, ("sdpa",), "inference", "again")  # ours: may be rewritten


def test_the_plan_is_never_written_over_a_file_we_did_not_write(tmp_path):
    mine = tmp_path / "train.py"
    mine.write_text("print('the user's training script')\n")
    with pytest.raises(UserInputError, match="was not written by advisor"):
        write_plan_module(mine, ("sdpa",), "inference", "s")
    assert mine.read_text() == "print('the user's training script')\n"
    with pytest.raises(UserInputError, match="not a .py file"):
        write_plan_module(tmp_path / "plan.txt", ("sdpa",), "inference", "s")


def test_an_empty_plan_returns_the_model_itself():
    model = nn.Linear(4, 4)
    assert apply_plan(model, [torch.randn(2, 4)], ()) is model


# ---------------------------------------------------------------- train steps


def _trained(loaded, steps=3):
    step = make_step(loaded, "train")
    for _ in range(steps):
        step()


def test_a_train_step_runs_the_files_optimizer_and_the_gate_does_not():
    model = nn.Linear(6, 3)
    created = []

    def make_optimizer(m):
        created.append(m)
        return torch.optim.SGD(m.parameters(), lr=0.1)

    loaded = dataclasses.replace(loaded_of(model, seeded(5, 6)), make_optimizer=make_optimizer)
    before = model.weight.detach().clone()
    make_step(loaded, "train", optimizer=False)()
    assert torch.equal(model.weight, before) and not created  # the gate's steps leave the weights
    _trained(loaded)
    assert created == [model] and not torch.equal(model.weight, before)  # one optimizer, three steps


def test_timing_train_steps_gives_the_weights_back(tmp_path):
    model = nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.Linear(16, 16))
    loaded = dataclasses.replace(loaded_of(model, seeded(8, 16)),
                                 make_optimizer=lambda m: torch.optim.SGD(m.parameters(), lr=0.5))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with search._weights_kept(loaded, "train"):
        _trained(loaded)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_unprofiled_training_gates_gradients_not_updated_weights(tmp_path):
    model = NaiveAttention(d=32, heads=4)
    loaded = dataclasses.replace(loaded_of(model, seeded(2, 9, 32)),
                                 make_optimizer=lambda m: torch.optim.AdamW(m.parameters(), lr=1e-2))
    m = engine.measure_actions(loaded, "train", ["sdpa"], QUICK, run_dir=tmp_path)
    o = m.outcomes["sdpa"]
    assert o.status == "passed", o  # gradients compared; the optimizer moved nothing between draws
    assert o.gate["leaves"] > 1  # the output and every parameter's gradient


# ---------------------------------------------------------------- the harness's own cost


def test_each_compiled_variant_enters_through_a_code_object_of_its_own():
    from kernel_advisor.trykernel.compiled import compile_in_own_frame

    model = nn.Linear(4, 4)
    a, b = compile_in_own_frame(model), compile_in_own_frame(model, "max-autotune-no-cudagraphs")
    code_a, code_b = (type(m._orig_mod).forward.__code__ for m in (a, b))
    assert code_a is not code_b and code_a.co_name != code_b.co_name  # one Dynamo cache entry per frame
    x = torch.randn(3, 4)
    assert a._orig_mod.inner is model and torch.equal(a._orig_mod(x), model(x))


def test_the_loop_enters_no_grad_once_per_window_not_per_step():
    from kernel_advisor.collect.runner import loop_step

    seen = []

    class Probe(nn.Module):
        def forward(self, x):
            seen.append(torch.is_grad_enabled())
            return x * 2

    loaded = loaded_of(Probe(), seeded(2, 3))
    activate, step = loop_step(loaded, "inference")
    with activate():
        step(), step()
    assert seen == [False, False]
    step()  # outside the window's contexts the bare step is just the model's call
    assert seen[-1] is True
