"""Profiling on CUDA: kernels attributed to their ops, sums hold, overhead recorded."""
import json

import pytest
import torch
from typer.testing import CliRunner

import kernel_advisor.cli
from kernel_advisor.collect.rundir import load_run, resolve_run

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
runner = CliRunner()


@pytest.mark.parametrize("mode", ["inference", "train"])
def test_gpt_example_on_cuda(advisor_home, examples_dir, mode):
    res = runner.invoke(kernel_advisor.cli.app, ["profile", f"{examples_dir}/gpt_block.py", "--device", "cuda",
                                                 "--mode", mode, "--dtype", "bfloat16", "--steps", "3"])
    assert res.exit_code == 0, res.output
    run = load_run(resolve_run())
    ops = run.ops
    assert run.meta["device"]["type"] == "cuda" and run.meta["device"]["sm_count"] > 0
    assert ops["device_time_total_s"].sum() == pytest.approx(run.meta["total_device_time_s"], rel=0.01)
    # eager model: every kernel has an op parent, and the big ops launched kernels
    assert set(ops["kind"]) == {"op"}
    for name in ("aten::linear", "aten::matmul", "aten::softmax"):
        rows = ops[ops["name"] == name]
        assert len(rows) and (rows["kernel_count"] > 0).all(), name
        kernels = rows.iloc[0]["kernels"]
        assert sum(k["time_total_s"] for k in kernels) == pytest.approx(rows.iloc[0]["device_time_total_s"], rel=1e-6)
    assert 0 < run.meta["device_busy_frac"] <= 1
    assert run.meta["profiler_overhead_ratio"] > 0
    # Same steps, same launches: the timing pass's durations were laid onto the trace, and its
    # steps (not the shapes pass's) are the profiled steps the overhead compares.
    timing = run.meta["kernel_timing"]
    assert timing["source"] == "kernels-only", timing
    assert timing["events"] >= ops["kernel_count"].sum() > 0  # every kernel (memcpy/memset too)
    assert len(timing["shapes_pass_step_wall_s"]) == len(run.meta["step_wall_s"]) == 3
    assert len(timing["unprofiled_step_wall_s"]) == 6  # timed right before and after the timing pass
    assert run.meta["step_wall_s"] != timing["shapes_pass_step_wall_s"]
    assert run.meta["peak_memory_kind"] == "cuda_max_allocated" and run.meta["peak_memory_bytes"] > 0


def test_compiled_model_shows_triton_kernels_not_compile_time(advisor_home, tmp_path):
    path = tmp_path / "compiled.py"
    path.write_text(
        "import torch\n"
        "class Model(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.f = torch.compile(lambda x: torch.nn.functional.gelu(x * 2 + 1).sum(-1))\n"
        "    def forward(self, x):\n"
        "        return self.f(x)\n"
        "def get_inputs():\n"
        "    return [torch.randn(4096, 4096)]\n")
    res = runner.invoke(kernel_advisor.cli.app, ["profile", str(path), "--device", "cuda", "--steps", "3", "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    names = [h["name"] for h in doc["hotspots"]]
    assert any(n.startswith("triton_") for n in names)
    # warm-up ran outside the profiler: no compile-time ops among the hotspots
    assert not any("compile" in n.lower() or "dynamo" in n.lower() for n in names)
