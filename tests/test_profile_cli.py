"""`advisor profile` and `advisor import` end to end on CPU, through the real CLI (CliRunner)."""
import gzip
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import kernel_advisor.cli
from kernel_advisor.collect.rundir import SCHEMA_VERSION, load_run, resolve_run

DATA = Path(__file__).parent / "data"
RUN_JSON_KEYS = {"schema_version", "tool_version", "created", "source", "model", "args", "device", "versions",
                 "settings", "steps", "step_wall_s", "unprofiled_step_wall_s", "profiler_overhead_ratio",
                 "peak_memory_bytes", "total_device_time_s", "device_busy_s", "device_busy_frac", "ceilings",
                 "coverage", "files"}
OPS_COLUMNS = {"row_id", "name", "kind", "input_shapes", "input_dtypes", "input_strides", "concrete_inputs", "calls",
               "device_time_total_s", "device_time_per_step_s", "device_time_per_call_s", "share_pct",
               "cpu_time_total_s", "kernels", "kernel_count", "kernel_time_per_launch_s", "max_blocks", "first_seq",
               "region", "modelled", "flops_per_call", "bytes_per_call", "intensity", "compute_path",
               "peak_flops_per_s", "bandwidth_bytes_per_s", "roofline_per_call_s", "achieved_flops_per_s",
               "achieved_bytes_per_s", "efficiency_frac", "headroom_total_s", "verdict"}

runner = CliRunner()


def advisor(*args):
    return runner.invoke(kernel_advisor.cli.app, [str(a) for a in args])


@pytest.mark.parametrize("mode", ["inference", "train"])
def test_profile_gpt_example_writes_a_complete_run(advisor_home, examples_dir, mode):
    res = advisor("profile", f"{examples_dir}/gpt_block.py", "--device", "cpu", "--mode", mode,
                  "--steps", 2, "--warmup", 1)
    assert res.exit_code == 0, res.output
    assert "Top hotspots" in res.stdout and "trace:" in res.stdout
    run = load_run(resolve_run())
    assert set(run.meta) >= RUN_JSON_KEYS
    assert set(run.ops.columns) >= OPS_COLUMNS
    assert run.meta["device"]["type"] == "cpu" and run.meta["args"]["mode"] == mode
    assert run.meta["steps"] == 2 and len(run.meta["step_wall_s"]) == 2
    assert run.ops["device_time_total_s"].sum() == pytest.approx(run.meta["total_device_time_s"], rel=0.01)
    with gzip.open(run.path / "trace.json.gz") as f:
        assert "traceEvents" in json.load(f)
    names = list(run.sequence["name"])
    assert "aten::softmax" in names and "aten::linear" in names
    if mode == "train":
        assert any("backward" in n for n in run.ops["name"])


def test_profile_json_output_is_machine_readable(advisor_home, examples_dir):
    res = advisor("profile", f"{examples_dir}/mlp.py", "--device", "cpu", "--steps", 3, "--warmup", 1,
                  "--json", "--top", 3)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert len(doc["hotspots"]) == 3 and doc["run"]["schema_version"] == SCHEMA_VERSION
    assert doc["hotspots"][0]["name"] == "aten::linear"  # 4 linears dominate the MLP


def test_profile_out_dir_and_dict_outputs(advisor_home, examples_dir, tmp_path):
    out = tmp_path / "my-run"
    res = advisor("profile", f"{examples_dir}/cnn.py", "--device", "cpu", "--steps", 1, "--out", out)
    assert res.exit_code == 0, res.output
    assert (out / "run.json").is_file() and resolve_run() == out.resolve()
    assert "aten::conv2d" in set(load_run(out).ops["name"])


@pytest.mark.parametrize("args,code,text", [
    (["--steps", 0], 1, "--steps must be at least 1"),
    (["--warmup", -1], 1, "--warmup cannot be negative"),
    (["--device", "tpu"], 1, "tpu"),
])
def test_profile_bad_options(advisor_home, examples_dir, args, code, text):
    res = advisor("profile", f"{examples_dir}/mlp.py", *args)
    assert res.exit_code == code
    assert text in res.output and "Traceback" not in res.output
    assert not (advisor_home / "runs" / "latest").exists()


def test_import_a_real_h200_trace(advisor_home):
    res = advisor("import", DATA / "cuda_gpt_train.json.gz", "--json")
    assert res.exit_code == 0, res.output
    run = load_run(resolve_run())
    assert run.meta["source"] == "import" and run.meta["device"]["name"] == "NVIDIA H200"
    assert run.meta["device"]["sm_count"] == 132
    assert run.ops["device_time_total_s"].sum() == pytest.approx(run.meta["total_device_time_s"], rel=0.01)
    mm = run.ops[run.ops["name"] == "aten::mm"]
    assert mm["modelled"].all() and (mm["flops_per_call"] > 0).all()


def test_import_missing_trace(advisor_home):
    res = advisor("import", "nope.json.gz")
    assert res.exit_code == 1 and "does not exist" in res.output
