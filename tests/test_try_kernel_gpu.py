"""try-kernel on a GPU: reference kernels in the example models pass the gate and get timings."""
import json
import textwrap
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import kernel_advisor.cli
from reference_kernels import registry
from reference_kernels.registry import EAGER_ROUTE, get_kernel
from reference_kernels.routes import Point, RouteTable

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.fixture(autouse=True)
def kernels_everywhere(request, monkeypatch):
    """These tests check substitution itself, so the measured routes (which send most host-bound
    shapes to eager) are off unless a test asks for them with @pytest.mark.routes."""
    if "routes" not in request.keywords:
        monkeypatch.setattr(registry, "routes", lambda: {})

LAYERNORM_MODEL = textwrap.dedent("""
    import torch, torch.nn as nn

    class Model(nn.Module):
        def __init__(self, d=1024):
            super().__init__()
            self.fc = nn.Linear(d, d)
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)

        def forward(self, x):
            h = x + self.fc(self.ln1(x))
            return self.ln2(h)

    def get_inputs():
        return [torch.randn(16, 512, 1024)]
""")
FAST = ["--device", "cuda", "--reps", "10", "--draws", "2", "--no-compile", "--json"]


def runnable(kernel):
    """CUDA C++ kernels also need nvcc on the GPU machine: skip with the registry's reason."""
    reason = get_kernel(kernel).reason_if_unsatisfied("cuda")
    if reason:
        pytest.skip(f"{kernel}: {reason}")
    return kernel


def run(model, *args):
    result = CliRunner().invoke(kernel_advisor.cli.app, ["try-kernel", str(model), *args, *FAST])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    return {v["name"]: v for v in out["variants"]}, out


def assert_measured(v):
    assert v["status"] == "passed", v["reason"]
    assert v["calls"] > 0
    assert v["timing_label"].startswith("back-to-back")
    assert v["step_s"]["value"] > 0 and v["speedup"]["low"] <= v["speedup"]["value"] <= v["speedup"]["high"]
    assert v["op"]["baseline_s"] > 0 and v["op"]["variant_s"] > 0
    assert v["peak_memory_bytes"] > 0


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
@pytest.mark.parametrize("kernel", ["triton.softmax", "triton.rms_norm", "triton.swiglu", "triton.add_rms_norm",
                                    "cuda.softmax", "cuda.rms_norm"])
def test_gpt_block_candidates_pass_and_are_timed(examples_dir, advisor_home, kernel, dtype):
    # The CUDA kernels run as advisor_cuda operators: the profiler ties their device time to
    # the operator, so the module-swapped cuda.rms_norm has a measured per-op time too.
    variants, out = run(f"{examples_dir}/gpt_block.py", runnable(kernel), "--dtype", dtype)
    assert_measured(variants[kernel])
    assert out["float64_reference"] == ""  # the gate compared against float64 too
    assert variants["eager"]["step_s"]["value"] > 0


@pytest.mark.parametrize("kernel", ["triton.layer_norm", "cuda.layer_norm", "triton.add_layer_norm"])
def test_layer_norm_candidates(tmp_path, advisor_home, kernel):
    model = tmp_path / "ln_model.py"
    model.write_text(LAYERNORM_MODEL)
    variants, _ = run(model, runnable(kernel), "--dtype", "bfloat16")
    assert_measured(variants[kernel])


def test_all_together_in_train_mode(examples_dir, advisor_home):
    variants, _ = run(f"{examples_dir}/gpt_block.py", "triton.softmax", "triton.rms_norm", "triton.swiglu",
                      "--all", "--mode", "train", "--dtype", "bfloat16")
    for name in ("triton.softmax", "triton.rms_norm", "triton.swiglu", "all together"):
        assert_measured(variants[name])
    assert variants["all together"]["gate"]["leaves"] > 1  # outputs and parameter gradients


def test_torch_compile_variant_reports_compile_time(examples_dir, advisor_home):
    result = CliRunner().invoke(kernel_advisor.cli.app, [
        "try-kernel", f"{examples_dir}/mlp.py", "triton.gelu", "--device", "cuda", "--reps", "10", "--draws", "1",
        "--json"])
    assert result.exit_code == 0, result.output
    variants = {v["name"]: v for v in json.loads(result.stdout)["variants"]}
    compiled = variants["torch.compile"]
    assert compiled["status"] == "passed" and compiled["compile_s"] > 0 and compiled["step_s"]["value"] > 0
    assert_measured(variants["triton.gelu"])


def test_compile_plus_kernel_is_timed_against_torch_compile(examples_dir, advisor_home):
    # the mlp's two F.gelu calls become advisor_kernels::gelu nodes of the compiled graph
    result = CliRunner().invoke(kernel_advisor.cli.app, [
        "try-kernel", f"{examples_dir}/mlp.py", "triton.gelu", "--device", "cuda", "--reps", "10", "--draws", "1",
        "--mode", "train", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    variants = {v["name"]: v for v in out["variants"]}
    plain, with_kernel = variants["torch.compile"], variants["torch.compile + triton.gelu"]
    assert with_kernel["kind"] == "compile+kernel" and with_kernel["status"] == "passed", with_kernel["reason"]
    assert with_kernel["graph_breaks"] == plain["graph_breaks"] == 0 and with_kernel["calls"] == 2
    assert with_kernel["timing_label"].startswith("back-to-back") and with_kernel["compile_s"] > 0
    e = with_kernel["speedup_vs_compile"]
    assert e["low"] <= e["value"] <= e["high"] and with_kernel["verdict_vs_compile"]
    assert any("against torch.compile alone" in n for n in out["notes"])


@pytest.mark.routes
def test_routed_calls_run_eager_and_say_so(examples_dir, advisor_home, monkeypatch):
    # A table whose only point says the kernel lost: every rms_norm call goes to eager.
    lost = Point(4096, 4096, 0.09, 0.01, 0.03, 0.01, "GPU X", "abc1234")
    table = RouteTable("triton.rms_norm", {("bfloat16", "fwd"): (lost,)})
    monkeypatch.setattr(registry, "routes", lambda: {"triton.rms_norm": table})
    variants, _ = run(f"{examples_dir}/gpt_block.py", "triton.rms_norm", "--dtype", "bfloat16")
    v = variants["triton.rms_norm"]
    assert v["status"] == "not applied" and v["eager_routed_calls"] == v["fallback_calls"] > 0
    assert v["reason"].startswith("every call fell back to PyTorch: " + EAGER_ROUTE)
    # gpt_block's 8192x1024 calls are 0.5x the point's elements: GPU 90 and 30 us scale to 45 and 15
    assert "triton.rms_norm loses at 4096x4096 bfloat16 fwd" in v["reason"]
    assert "45.0 us against eager's 15.0 us" in v["reason"] and "scaled 0.5x" in v["reason"]


@pytest.mark.routes
def test_a_host_bound_model_is_never_made_slower_silently(advisor_home):
    """The shipped routes' promise: profiled first, so try-kernel knows the step
    is host-bound (a small ViT: the device busy ~20 % of it), every bundled kernel either keeps the
    model as fast or names the calls it left to eager."""
    model = Path(__file__).resolve().parents[1] / "benchmarks" / "advice" / "models" / "vit_tiny.py"
    profiled = CliRunner().invoke(kernel_advisor.cli.app, [
        "profile", str(model), "--device", "cuda", "--dtype", "bfloat16", "--steps", "5", "--warmup", "3"])
    assert profiled.exit_code == 0, profiled.output
    kernels = [f"{backend}.{op}" for backend in ("triton", "cuda")
               for op in ("layer_norm", "gelu", "softmax")]
    kernels = [k for k in kernels if not get_kernel(k).reason_if_unsatisfied("cuda")]
    variants, out = run(model, *kernels, "--dtype", "bfloat16")
    assert any("(host-bound)" in n for n in out["notes"]), out["notes"]
    for name in kernels:
        v = variants[name]
        slower = v["status"] == "passed" and v["speedup"]["high"] < 1.0
        assert not slower or v["eager_routed_calls"] > 0, (name, v["speedup"], v["reason"])
