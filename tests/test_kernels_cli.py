"""`advisor kernels` and `advisor kernels verify` through the real CLI: output and exit codes."""
import json

import pytest
import torch
from typer.testing import CliRunner

import kernel_advisor.cli
from reference_kernels import registry
from reference_kernels.registry import Capability, KernelSpec, all_kernels
from reference_kernels.triton import _common

pytestmark = [pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning")]
runner = CliRunner()
DEV = "cuda" if torch.cuda.is_available() else "cpu"


def advisor(*args):
    return runner.invoke(kernel_advisor.cli.app, [str(a) for a in args])


def silu_off_by_one_percent(x):
    return torch.nn.functional.silu(x) * 1.01


def _spec(kernel_id, loader, capability=None):
    return KernelSpec(id=kernel_id, title="test kernel", loader=loader,
                      reference="reference_kernels.triton.eager:silu",
                      capability=capability or Capability(backend="python-test"))


BROKEN = _spec("test.silu", f"{__name__}:silu_off_by_one_percent")
EAGER = _spec("test.silu", "reference_kernels.triton.eager:silu")
NEEDS_GPU = _spec("cuda.silu", "reference_kernels.triton.eager:silu",
                  Capability(backend="cuda", needs_gpu=True))


@pytest.mark.parametrize("args", [["kernels"], ["kernels", "list"]])
def test_list_shows_every_registered_kernel(args):
    result = advisor(*args, "--device", "cpu")
    assert result.exit_code == 0, result.output
    for spec in all_kernels():
        assert spec.id in result.stdout
    assert "Reference kernels (status on cpu)" in result.stdout


def test_list_json_carries_status_per_kernel():
    result = advisor("kernels", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema_version"] == 2 and doc["device"] == "cpu"
    rows = {row["id"]: row for row in doc["kernels"]}
    assert rows["triton.softmax"]["status"] == "ok"  # Triton runs on CPU in the interpreter
    assert rows["triton.softmax"]["replaces_aten"] == ["aten::_softmax"]
    assert rows["triton.matmul"]["has_backward"] is False
    assert rows["triton.swiglu"]["replaces_patterns"] == ["swiglu-mlp"]


def test_verify_one_kernel_json_passes():
    result = advisor("kernels", "verify", "triton.silu", "--device", DEV, "--json")
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    (silu,) = payload["results"]
    assert payload["device"] == DEV and silu["kernel_id"] == "triton.silu" and silu["passed"]
    assert {c["check"] for c in silu["cases"]} == {"forward", "backward", "deterministic",
                                                   "gradcheck"}


def test_verify_table_output():
    result = advisor("kernels", "verify", "triton.swiglu", "--device", DEV)
    assert result.exit_code == 0, result.output
    assert "triton.swiglu" in result.stdout and "PASS" in result.stdout


def test_unknown_id_exits_1():
    result = advisor("kernels", "verify", "triton.nope")
    assert result.exit_code == 1
    assert "unknown kernel id 'triton.nope'" in result.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_device_without_gpu_exits_2():
    result = advisor("kernels", "verify", "triton.silu", "--device", "cuda")
    assert result.exit_code == 2
    assert "no CUDA device" in result.stderr


def test_cpu_without_interpreter_exits_2(monkeypatch):
    monkeypatch.setattr(_common, "INTERPRETED", False)  # triton imported without it
    result = advisor("kernels", "verify", "triton.silu", "--device", "cpu")
    assert result.exit_code == 2
    assert "TRITON_INTERPRET=1" in result.stderr


def test_failing_kernel_json_stays_valid_with_long_reasons(monkeypatch):
    monkeypatch.setattr(registry, "get_kernel", lambda kernel_id: BROKEN)
    result = advisor("kernels", "verify", "test.silu", "--device", DEV, "--json")
    assert result.exit_code == 3
    (silu,) = json.loads(result.stdout)["results"]
    reasons = [c["reason"] for c in silu["cases"] if not c["passed"]]
    assert reasons and all(r.startswith("relative error norm") for r in reasons)


def test_failing_kernel_exits_3_and_shows_the_cases(monkeypatch):
    monkeypatch.setattr(registry, "get_kernel", lambda kernel_id: BROKEN)
    result = advisor("kernels", "verify", "test.silu", "--device", DEV)
    assert result.exit_code == 3
    assert "FAIL" in result.stdout and "relative error norm" in result.stdout
    assert "1 of 1 kernels failed verification" in result.stderr


def test_verify_all_skips_kernels_that_cannot_run_here(monkeypatch):
    monkeypatch.setattr(registry, "all_kernels", lambda: (EAGER, NEEDS_GPU))
    result = advisor("kernels", "verify", "--device", "cpu", "--json")
    assert result.exit_code == 0, result.output
    assert [r["kernel_id"] for r in json.loads(result.stdout)["results"]] == ["test.silu"]
    assert "skipping 1 kernel(s) that cannot run on cpu: cuda.silu" in result.stderr


def test_verify_all_with_nothing_runnable_exits_2(monkeypatch):
    monkeypatch.setattr(registry, "all_kernels", lambda: (NEEDS_GPU,))
    result = advisor("kernels", "verify", "--device", "cpu")
    assert result.exit_code == 2
