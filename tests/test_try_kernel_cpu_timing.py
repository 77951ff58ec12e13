"""try-kernel on CPU: eager, torch.compile and native kernels are timed; interpreted Triton kernels are not."""
import json
import textwrap

import pytest
import torch
from typer.testing import CliRunner

import kernel_advisor.cli
from kernel_advisor.collect.loader import load_model
from kernel_advisor.trykernel.candidates import Candidate, CandidateSet, TryOptions, default_tolerance
from kernel_advisor.trykernel.driver import try_candidates
from kernel_advisor.trykernel.timing import INTERPRETED
from kernel_advisor.trykernel.results import RunEvidence
from kernel_advisor.trykernel.substitute_aten import reference_adapter

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
VERDICTS = ("faster", "slower", "no measurable difference")


@pytest.fixture
def tiny(tmp_path, advisor_home):
    path = tmp_path / "tiny.py"
    path.write_text(MODEL)
    return path


def _interval(estimate):
    return estimate is not None and 0 < estimate["low"] <= estimate["value"] <= estimate["high"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="Triton runs in its CPU interpreter only where conftest set "
                    "TRITON_INTERPRET=1 before triton was imported: on machines without CUDA")
def test_eager_and_compile_are_timed_while_the_triton_kernel_is_only_checked(tiny):
    result = CliRunner().invoke(kernel_advisor.cli.app, [
        "try-kernel", str(tiny), "triton.softmax", "--device", "cpu", "--reps", "5", "--warmup", "1",
        "--draws", "2", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    by_name = {v["name"]: v for v in out["variants"]}
    eager, compiled, triton = by_name["eager"], by_name["torch.compile"], by_name["triton.softmax"]
    assert out["timing"] .startswith("back-to-back")
    assert eager["timing_label"] .startswith("back-to-back") and _interval(eager["step_s"])
    assert compiled["status"] == "passed" and compiled["timing_label"] .startswith("back-to-back")
    assert _interval(compiled["step_s"]) and _interval(compiled["speedup"])
    assert compiled["verdict"] in VERDICTS and compiled["compile_s"] > 0
    assert triton["status"] == "passed" and triton["calls"] == 2
    assert triton["timing_label"] == f"not timed: {INTERPRETED}" and triton["step_s"] is None
    assert triton["verdict"] == "" and triton["speedup"] is None
    assert any("Triton kernels run in the interpreter" in n for n in out["notes"])
    assert not any("compile variant left out" in n for n in out["notes"])


def _softmax(x, dim=-1):
    return torch.softmax(x.double(), dim).to(x.dtype)


def _candidate(cid, backend):
    dtypes = ("float32",)
    return Candidate(cid, cid, "reference", backend, _softmax, (reference_adapter("aten::_softmax", dtypes, False),),
                     (), dtypes, False, default_tolerance)


def test_native_kernels_are_timed_and_interpreted_ones_are_not(tiny):
    loaded = load_model(tiny, device="cpu")
    sets = [CandidateSet(c.id, (c,)) for c in (_candidate("native", "python"), _candidate("interp", "triton"))]
    options = TryOptions(draws=2, reps=3, warmup=1, profile_steps=1, compile=False)
    report = try_candidates(loaded, sets, options, RunEvidence())
    res = {v.name: v for v in report.variants}
    assert report.timing .startswith("back-to-back")
    assert res["eager"].step_s is not None
    assert res["native"].step_s is not None and res["native"].speedup is not None and res["native"].verdict
    assert res["interp"].status == "passed" and res["interp"].step_s is None
    assert res["interp"].timing_label == f"not timed: {INTERPRETED}"


def test_check_only_still_times_nothing(tiny):
    loaded = load_model(tiny, device="cpu")
    sets = [CandidateSet("native", (_candidate("native", "python"),))]
    options = TryOptions(draws=1, reps=3, warmup=1, compile=True, check_only=True)
    report = try_candidates(loaded, sets, options, RunEvidence())
    assert report.timing == "none (check only)"
    assert [v.name for v in report.variants] == ["eager", "native"]  # no compile: nothing to time it against
    assert all(v.step_s is None for v in report.variants)
