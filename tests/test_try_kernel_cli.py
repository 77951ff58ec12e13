"""`advisor try-kernel` through typer's CliRunner: exit codes, --impl errors, --json, try_kernel.json."""
import json
import os
import textwrap

import pytest
import torch
from typer.testing import CliRunner

import kernel_advisor.cli
from kernel_advisor.collect.loader import file_sha256
from kernel_advisor.records.run import SCHEMA_VERSION

MODEL = textwrap.dedent("""
    import torch, torch.nn as nn, torch.nn.functional as F

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(32, 32)

        def forward(self, x):
            return F.softmax(self.fc(x), dim=-1) * 4.0 + x

    def get_inputs():
        return [torch.randn(3, 7, 32)]
""")
KERNELS = textwrap.dedent("""
    import torch

    def good(self, dim, half_to_float):
        e = (self.double() - self.double().amax(dim, keepdim=True)).exp()
        return (e / e.sum(dim, keepdim=True)).to(self.dtype)

    def wrong(self, dim, half_to_float):
        return torch.softmax(self, dim) * 1.05

    def writes_nothing(self, dim, half_to_float):
        return torch.empty_like(self)

    def two_args(self, dim):
        return torch.softmax(self, dim)

    def raises(self, dim, half_to_float):
        raise ValueError("boom")

    def wrong_dtype(self, dim, half_to_float):
        return torch.softmax(self.double(), dim)
""")
FAST = ["--device", "cpu", "--no-compile", "--reps", "3", "--warmup", "1", "--draws", "2"]
# NB: Triton chooses interpreter or GPU once, when a kernel is first decorated; conftest.py sets
# TRITON_INTERPRET=1 only without CUDA, so on a GPU machine the kernels are GPU kernels by now.
triton_on_cpu = pytest.mark.skipif(
    torch.cuda.is_available(),
    reason="runs a Triton kernel on CPU tensors: needs TRITON_INTERPRET=1 before Triton is imported, "
           "which conftest.py sets only on a machine without CUDA")


@pytest.fixture(autouse=True)
def _triton_interpret_restored():
    """`--device cpu` sets TRITON_INTERPRET=1 in this process; later (GPU) tests must not inherit it."""
    before = os.environ.get("TRITON_INTERPRET")
    yield
    if before is None:
        os.environ.pop("TRITON_INTERPRET", None)
    else:
        os.environ["TRITON_INTERPRET"] = before


@pytest.fixture
def files(tmp_path, advisor_home):
    (tmp_path / "tiny.py").write_text(MODEL)
    (tmp_path / "kernels.py").write_text(KERNELS)
    return tmp_path


def invoke(*args):
    return CliRunner().invoke(kernel_advisor.cli.app, ["try-kernel", *args])


def impl(files, fn, *extra):
    return invoke(str(files / "tiny.py"), "--impl", f"{files / 'kernels.py'}:{fn}", "--op", "aten::_softmax",
                  *FAST, *extra)


def test_a_correct_impl_passes_and_is_timed(files):
    result = impl(files, "good", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    by_name = {v["name"]: v for v in out["variants"]}
    mine = by_name["kernels.py:good"]
    assert mine["status"] == "passed" and mine["calls"] == 2  # one softmax per step × 2 draws
    assert mine["timing_label"] .startswith("back-to-back") and mine["step_s"]["value"] > 0
    assert mine["verdict"] in ("faster", "slower", "no measurable difference")
    assert by_name["eager"]["status"] == "baseline"
    assert out["run"] is None  # no run yet: nothing saved


@pytest.mark.parametrize("fn, words", [
    ("wrong", "relative error 0.05 exceeds 1e-05"),
    ("writes_nothing", "call 1 of aten::_softmax"),
    ("two_args", "cannot take the 3 arguments"),
    ("raises", "raised ValueError: boom"),
    ("wrong_dtype", "dtype float64, expected float32"),
])
def test_a_failing_impl_is_failed_with_its_reason_and_exit_3(files, fn, words):
    result = impl(files, fn)
    assert result.exit_code == 3, result.output
    assert "FAILED" in result.stdout and words in result.stdout
    assert "Traceback" not in result.output
    assert "FAILED the correctness gate" in result.stderr


@pytest.mark.parametrize("impl_arg, op, code, words", [
    ("missing.py:good", "aten::_softmax", 1, "does not exist"),
    ("{kernels}:nope", "aten::_softmax", 1, "has no function 'nope'"),
    ("{kernels}", "aten::_softmax", 1, "is not FILE.py:FUNCTION"),
    ("{kernels}:good", "aten::no_such_op", 1, "unknown aten op"),
])
def test_bad_impl_arguments_are_input_errors(files, impl_arg, op, code, words):
    arg = impl_arg.format(kernels=files / "kernels.py")
    result = invoke(str(files / "tiny.py"), "--impl", arg, "--op", op, *FAST)
    assert result.exit_code == code, result.output
    assert words in result.stderr and "Traceback" not in result.output


def test_impl_needs_op(files):
    result = invoke(str(files / "tiny.py"), "--impl", f"{files / 'kernels.py'}:good", *FAST)
    assert result.exit_code == 1 and "--impl and --op go together" in result.stderr


def test_bad_counts_are_input_errors(files):
    result = invoke(str(files / "tiny.py"), "--impl", f"{files / 'kernels.py'}:good", "--op", "_softmax",
                    "--device", "cpu", "--reps", "2")
    assert result.exit_code == 1 and "--reps must be at least 3" in result.stderr


def write_run(home, model_path, share_pct):
    run = home / "runs" / "tiny-20260101-000000"
    run.mkdir(parents=True)
    meta = {"schema_version": SCHEMA_VERSION, "model": {"file": str(model_path), "sha256": file_sha256(model_path)}}
    (run / "run.json").write_text(json.dumps(meta))
    # the columns every run has (records/columns.py OPS_REQUIRED, SEQUENCE_REQUIRED); try-kernel reads share_pct
    (run / "ops.csv").write_text("row_id,name,kind,input_shapes,input_dtypes,calls,device_time_total_s,share_pct\n"
                                 f"0,aten::linear,op,[],[],1,0.001,{100 - share_pct}\n"
                                 f"1,aten::softmax,op,[],[],1,0.001,{share_pct}\n")
    (run / "sequence.csv").write_text("seq,step,name,row_id,input_shapes,input_dtypes,device_time_per_call_s\n"
                                      "0,0,aten::linear,0,[],[],0.001\n1,0,aten::softmax,1,[],[],0.001\n")
    (home / "runs" / "latest").write_text(run.name + "\n")
    return run


def test_results_are_saved_into_the_models_run(files, advisor_home):
    run = write_run(advisor_home, files / "tiny.py", 40.0)
    result = impl(files, "good")
    assert result.exit_code == 0, result.output
    saved = json.loads((run / "try_kernel.json").read_text())
    assert saved["schema_version"] == 1 and saved["run"] == str(run)
    mine = {v["name"]: v for v in saved["variants"]}["kernels.py:good"]
    pred = mine["prediction"]
    # Amdahl from ops.csv: 0.40 × (1 − 1/op_speedup)
    assert pred["source"].startswith("ops.csv share 40.0%")
    assert pred["predicted_gain_frac"] == pytest.approx(0.40 * (1 - 1 / mine["op"]["speedup"]), rel=1e-9)


def test_a_run_of_another_model_is_refused_when_named(files, advisor_home):
    other = files / "other.py"
    other.write_text(MODEL + "\n# another model\n")
    run = write_run(advisor_home, other, 10.0)
    result = impl(files, "good", "--run", str(run))
    assert result.exit_code == 1 and "not tiny.py" in result.stderr
    assert impl(files, "good").exit_code == 0  # as `latest` it is just not used
    assert not (run / "try_kernel.json").exists()


@triton_on_cpu
def test_triton_kernel_on_cpu_is_checked_in_the_interpreter(files):
    result = invoke(str(files / "tiny.py"), "triton.softmax", *FAST, "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    mine = {v["name"]: v for v in out["variants"]}["triton.softmax"]
    assert mine["status"] == "passed" and mine["calls"] == 2
    assert mine["timing_label"].startswith("not timed: Triton interpreter")
    assert out["timing"] .startswith("back-to-back")  # eager is still timed (tests/test_try_kernel_cpu_timing.py)


def test_unknown_kernel_id_and_unmet_capability(files):
    assert invoke(str(files / "tiny.py"), "no.such.kernel", *FAST).exit_code == 1
    result = invoke(str(files / "tiny.py"), "cuda.softmax", *FAST)
    assert result.exit_code == 2 and "cuda.softmax cannot run here" in result.stderr


@triton_on_cpu
def test_default_selection_finds_the_applicable_kernels(files):
    result = invoke(str(files / "tiny.py"), *FAST, "--check-only", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    tried = {v["name"] for v in out["variants"]} - {"eager"}
    assert tried == {"triton.softmax"}  # the only op a kernel replaces; cuda.softmax is skipped on CPU
    assert any("skipped cuda.softmax" in n for n in out["notes"])
