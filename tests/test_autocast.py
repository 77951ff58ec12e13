"""--autocast: a model that makes float32 state in forward fails under --dtype bfloat16 (with a hint)
and runs under torch.autocast instead, in profile and try-kernel; the gate's reference runs without it."""
import json
import textwrap

import pytest
import torch
from typer.testing import CliRunner

import kernel_advisor.cli
from kernel_advisor.collect.loader import load_model
from kernel_advisor.collect.rundir import load_run, resolve_run
from kernel_advisor.collect.runner import make_step
from kernel_advisor.errors import UserInputError
from kernel_advisor.trykernel.reference import prepare_reference

# The LSTM use case: the hidden state is made in forward as float32, whatever the weights are.
MODEL = textwrap.dedent("""
    import torch, torch.nn as nn, torch.nn.functional as F

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.cell = nn.LSTMCell(16, 32)
            self.head = nn.Linear(32, 8)

        def forward(self, x):
            h = torch.zeros(x.shape[0], 32, device=x.device)
            c = torch.zeros(x.shape[0], 32, device=x.device)
            for t in range(x.shape[1]):
                h, c = self.cell(x[:, t], (h, c))
            return F.softmax(self.head(h).float(), dim=-1)

    def get_inputs():
        return [torch.randn(4, 5, 16)]
""")
KERNEL = textwrap.dedent("""
    import torch

    def softmax(self, dim, half_to_float):
        return torch.softmax(self.double(), dim).to(self.dtype)
""")


@pytest.fixture
def lstm(tmp_path, advisor_home):
    (tmp_path / "kernels.py").write_text(KERNEL)
    path = tmp_path / "lstm.py"
    path.write_text(MODEL)
    return path


def advisor(*args):
    return CliRunner().invoke(kernel_advisor.cli.app, [str(a) for a in args])


def test_dtype_bfloat16_fails_with_the_autocast_hint(lstm):
    res = advisor("profile", lstm, "--device", "cpu", "--dtype", "bfloat16", "--steps", 1, "--warmup", 0)
    assert res.exit_code == 1
    assert "same dtype" in res.stderr and "--autocast bfloat16 instead of --dtype bfloat16" in res.stderr


def test_profile_runs_under_autocast_and_records_it(lstm):
    res = advisor("profile", lstm, "--device", "cpu", "--autocast", "bfloat16", "--steps", 1, "--warmup", 1)
    assert res.exit_code == 0, res.output
    run = load_run(resolve_run())
    assert run.meta["args"]["autocast"] == "bfloat16" and run.meta["args"]["dtype"] == "keep"
    assert run.meta["settings"]["effective_dtype"] == "bfloat16"
    assert "bfloat16" in " ".join(run.ops["input_dtypes"].astype(str))  # ops ran in bfloat16


def test_profile_without_autocast_records_none(lstm):
    res = advisor("profile", lstm, "--device", "cpu", "--steps", 1, "--warmup", 0)
    assert res.exit_code == 0, res.output
    assert load_run(resolve_run()).meta["args"]["autocast"] is None


def test_autocast_with_a_16_bit_dtype_or_an_unknown_dtype_is_an_input_error(lstm):
    res = advisor("profile", lstm, "--device", "cpu", "--autocast", "bfloat16", "--dtype", "float16")
    assert res.exit_code == 1 and "drop --dtype float16" in res.stderr
    with pytest.raises(UserInputError, match="unknown --autocast 'int8'"):
        load_model(lstm, device="cpu", autocast="int8")


@pytest.mark.parametrize("mode", ["inference", "train"])
def test_steps_run_under_autocast(lstm, mode):
    loaded = load_model(lstm, device="cpu", autocast="bfloat16")
    assert loaded.autocast is torch.bfloat16 and next(loaded.model.parameters()).dtype == torch.float32
    seen = []
    loaded.model.head.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    make_step(loaded, mode)()
    assert seen == [torch.bfloat16]
    if mode == "train":
        assert loaded.model.head.weight.grad.dtype == torch.float32  # backward outside autocast, float32 weights


def test_the_reference_runs_without_autocast(tmp_path):
    path = tmp_path / "linear.py"
    path.write_text("import torch\nModel = lambda: torch.nn.Linear(16, 8)\nget_inputs = lambda: [torch.randn(4, 16)]\n")
    loaded = load_model(path, device="cpu", autocast="bfloat16")
    assert make_step(loaded, "inference")().dtype == torch.bfloat16
    ref = prepare_reference(loaded, "inference")
    (_, out), = ref.capture(loaded, loaded.inputs, "inference").leaves
    assert ref.reason == "float64" and out.dtype == torch.float64


def test_float32_state_in_forward_gets_a_float32_reference(lstm):
    loaded = load_model(lstm, device="cpu", autocast="bfloat16")
    ref = prepare_reference(loaded, "inference")
    (_, out), = ref.capture(loaded, loaded.inputs, "inference").leaves
    assert ref.reason.startswith("float32 reference (the model does not run in float64: RuntimeError: mat1 and mat2")
    assert out.dtype == torch.float32  # not autocast's bfloat16


def test_try_kernel_with_autocast(lstm):
    res = advisor("try-kernel", lstm, "--impl", f"{lstm.parent / 'kernels.py'}:softmax", "--op", "aten::_softmax",
                  "--device", "cpu", "--autocast", "bfloat16", "--no-compile", "--reps", 3, "--warmup", 1,
                  "--draws", 2, "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["args"]["autocast"] == "bfloat16"
    assert out["float64_reference"].startswith("float32 reference (the model does not run in float64")
    mine = {v["name"]: v for v in out["variants"]}["kernels.py:softmax"]
    assert mine["status"] == "passed" and mine["calls"] == 2 and mine["step_s"] is not None
    assert mine["gate"]["ref_rel_err"] is not None  # held against the float32 reference
