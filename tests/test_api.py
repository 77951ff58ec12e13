"""The Python API as a notebook uses it: profile an in-memory module, recommend, measure, reload."""
from __future__ import annotations

import importlib.util
import os

import pandas as pd
import pytest
import torch
import torch.nn as nn

import kernel_advisor as ka
from kernel_advisor.errors import UserInputError

DATA = os.path.join(os.path.dirname(__file__), "data")


def _llama():
    spec = importlib.util.spec_from_file_location("llama_naive_api", os.path.join(DATA, "llama_naive.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    llama = _llama()
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("api") / "run"
    return ka.profile(llama.Model(), llama.get_inputs, device="cpu", steps=2, warmup=1, out=out)


def test_profile_returns_a_run_with_flops(run):
    assert isinstance(run.ops, pd.DataFrame) and len(run.ops)
    linear = run.ops[run.ops["name"] == "aten::linear"]
    # qkv: 2 · (2·64 rows) · 128 · 384 = 12,582,912 FLOPs per call, among the linear rows
    assert 2 * 2 * 64 * 128 * 384 in set(linear["flops_per_call"].astype(int))
    assert run.meta["args"]["device"] == "cpu" and (run.path / "run.json").is_file()


def test_recommend_is_ranked_with_rule_ids(run):
    recs = run.recommend()
    assert recs and all(r.rule_id for r in recs)
    assert [r.rank for r in recs] == sorted(r.rank for r in recs)
    assert "lib-sdpa" in {r.rule_id for r in recs}
    assert (run.path / "recommendations.json").is_file()


def test_load_reopens_the_run(run):
    again = ka.load(run.path)
    assert again.meta == run.meta
    pd.testing.assert_frame_equal(again.ops, run.ops)


def test_recommend_measure_uses_the_in_memory_model(run):
    # top 1 plus sdpa by name: which finding ranks first rests on CPU timings, sdpa is measured either way
    recs = run.recommend(measure=True, top=1, also=("sdpa",))
    sdpa = next(r for r in recs if r.action == "sdpa")
    assert sdpa.measured.status == "passed", sdpa.measured.reason
    assert sdpa.measured.speedup["low"] <= sdpa.measured.speedup["high"]
    # after measuring, recs are ranked by measured gain; --top counts the predicted ranking
    first = min((r for r in recs if r.action != "none"), key=lambda r: r.predicted_rank).rule_id
    ranked_first = {r.action for r in recs if r.rule_id == first} | {"sdpa", "none"}
    others = [r for r in recs if r.action not in ranked_first]
    # how many findings the CPU timings produce varies; none beyond the first and sdpa is measured,
    # but the compile modes, which the search tries on every model
    assert all(r.action.startswith("compile") or (r.measured.status == "not-measurable"
                                                  and "--top" in r.measured.reason) for r in others)


def test_report_writes_html(run, tmp_path):
    path = ka.report(run, tmp_path / "r.html")
    assert path.read_text(encoding="utf-8").lower().startswith("<!doctype html>")


def test_bad_inputs_are_one_clear_error():
    with pytest.raises(UserInputError, match="inputs must be a list of tensors"):
        ka.profile(nn.Linear(2, 2), ["not a tensor"], device="cpu")


class _StateInForward(nn.Module):
    """Makes float32 state in forward, as an LSTM's hidden state: a bfloat16 cast breaks it."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        state = torch.zeros(x.shape[0], 16, device=x.device)  # float32 whatever the weights are
        return self.lin(x) + state @ self.lin.weight


def test_autocast_runs_float32_state_and_is_recorded(tmp_path):
    with pytest.raises(UserInputError, match="same dtype") as cast:
        ka.profile(_StateInForward(), [torch.randn(4, 16)], device="cpu", dtype="bfloat16", steps=1, warmup=0,
                   out=tmp_path / "cast")
    assert "--autocast bfloat16 instead of --dtype bfloat16" in cast.value.fix
    run = ka.profile(_StateInForward(), [torch.randn(4, 16)], device="cpu", autocast="bfloat16", steps=1,
                     warmup=0, out=tmp_path / "autocast")
    assert run.meta["args"]["autocast"] == "bfloat16" and run.meta["args"]["dtype"] == "keep"
    add = run.ops[run.ops["name"] == "aten::add"].iloc[0]
    assert list(add["input_dtypes"][:2]) == ["bfloat16", "bfloat16"]  # autocast's linear output, not float32
    assert run.model()[0].autocast == torch.bfloat16  # measuring and try_kernels run under it too


def test_autocast_needs_the_model_in_float32():
    with pytest.raises(UserInputError, match="autocast needs the model in float32"):
        ka.profile(nn.Linear(2, 2), [torch.randn(1, 2)], device="cpu", dtype="float16", autocast="bfloat16")


def test_recommend_groups_as_the_cli_does(run):
    recs = run.recommend()
    frame = recs.to_frame()
    assert list(frame["rank"]) == sorted(set(frame["rank"]))  # one row per finding, each rank once
    assert set(frame["rule_id"]) == {r.rule_id for r in recs}  # every finding, still iterable as before
    assert frame["subjects"].sum() == len(recs)
    pd.testing.assert_frame_equal(run.recommendations, frame)


def test_repr_is_short(run):
    text = repr(run)
    assert text.startswith(f"Run(path={str(run.path)!r}, model=") and "step=" in text and " ms" in text
    assert len(text) < 300 and "\n" not in text
