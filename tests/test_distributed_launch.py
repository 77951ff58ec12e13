"""`advisor profile --nproc-per-node N` on CPU (gloo), through the real CLI and torchrun."""
import gzip
import json
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import kernel_advisor.cli
from kernel_advisor.collect.rundir import load_run, read_table, resolve_run
from kernel_advisor.distributed.launch import child_env, error_line, rank_failure, torchrun_command
from kernel_advisor.distributed.worker import RankEnv, error_path, log_path, rank_env
from kernel_advisor.errors import AdvisorError, EnvironmentCapabilityError, UserInputError

runner = CliRunner()
DISTRIBUTED_KEYS = {"world_size", "straggler_ratio", "comm_time_s", "exposed_comm_s", "exposed_comm_pct",
                    "overlap_frac", "allreduce_count", "mean_allreduce_bytes", "busbw_frac_of_ceiling"}


def advisor(*args):
    return runner.invoke(kernel_advisor.cli.app, [str(a) for a in args])


@pytest.fixture
def own_tmp(tmp_path, monkeypatch):
    """The launcher's log directory lands here, so a test can see whether it was removed."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp


@pytest.mark.slow
def test_cpu_ddp_run_writes_every_rank_and_the_merge(advisor_home, examples_dir, own_tmp):
    res = advisor("profile", f"{examples_dir}/mlp.py", "--device", "cpu", "--mode", "train",
                  "--nproc-per-node", 2, "--steps", 2, "--warmup", 1)
    assert res.exit_code == 0, res.output
    assert "Top hotspots — rank 0 of 2" in res.stdout and "Ranks — 2 × gloo, ddp" in res.stdout
    assert "all-reduce" in res.stdout and "overlap" in res.stdout
    run = load_run(resolve_run())  # `latest` names the merged run
    for r in (0, 1):
        with gzip.open(run.path / f"rank{r}" / "trace.json.gz") as f:
            assert "traceEvents" in json.load(f)
        assert (run.path / f"rank{r}" / "ops.csv").is_file() and (run.path / f"rank{r}" / "sequence.csv").is_file()
    doc = json.loads((run.path / "ranks.json").read_text())
    assert [r["rank"] for r in doc["ranks"]] == [0, 1] and doc["backend"] == "gloo" and doc["wrapper"] == "ddp"
    assert all(len(r["step_wall_s"]) == 2 and r["step_median_s"] > 0 for r in doc["ranks"])
    assert doc["straggler"]["ratio"] >= 1.0
    ar = {c["collective"]: c for c in doc["collectives"]}["all_reduce"]
    # mlp.py on CPU: 4 Linear layers, 2 x (512*2048 + 2048) + 2 x (2048*512 + 512) fp32 = 16_797_696 bytes
    assert ar["bytes_per_step"] == pytest.approx(16_797_696)
    assert ar["busbw_bytes_per_s"] > 0 and ar["busbw_frac_of_ceiling"] is None  # gloo: no ceiling
    dist = run.meta["distributed"]
    assert set(dist) >= DISTRIBUTED_KEYS and dist["world_size"] == 2 and dist["backend"] == "gloo"
    assert 0.0 <= dist["overlap_frac"] <= 1.0 and dist["exposed_comm_s"] <= dist["comm_time_s"]
    assert run.meta["args"]["nproc_per_node"] == 2 and run.meta["files"]["ranks"] == "ranks.json"
    # rank 0's tables are the run's tables, so recommend/report read a distributed run unchanged
    pd.testing.assert_frame_equal(run.ops, read_table(run.path / "rank0" / "ops.csv"))
    assert "c10d::allreduce_" in set(run.ops["name"])
    assert not list(own_tmp.iterdir())  # the rank logs went with the success


BAD_RANK = '''import os
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        if os.environ.get("RANK") == "1":
            raise RuntimeError("boom on rank 1")
        return self.fc(x)


def get_inputs():
    return [torch.randn(4, 8)]
'''


@pytest.mark.slow
def test_a_failing_rank_is_one_error_line_and_no_run(advisor_home, tmp_path, own_tmp):
    model = tmp_path / "bad.py"
    model.write_text(BAD_RANK)
    res = advisor("profile", model, "--device", "cpu", "--mode", "train", "--nproc-per-node", 2,
                  "--steps", 1, "--warmup", 0)
    assert res.exit_code == 1
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert lines[0].startswith("advisor: error: rank 1: bad.py:13 in forward: RuntimeError: boom on rank 1")
    runs = advisor_home / "runs"
    assert not (runs / "latest").exists() and not list(runs.iterdir())  # no run, no partial directory
    assert not list(own_tmp.iterdir())  # a user error: its logs are not worth keeping


@pytest.mark.parametrize("args,code,text", [
    (["--nproc-per-node", 0], 1, "--nproc-per-node must be at least 1"),
    (["--fsdp"], 1, "--fsdp shards training"),
    (["--nproc-per-node", 2, "--fsdp", "--mode", "inference"], 1, "--fsdp shards training"),
])
def test_bad_distributed_options(advisor_home, examples_dir, args, code, text):
    res = advisor("profile", f"{examples_dir}/mlp.py", "--device", "cpu", *args)
    assert res.exit_code == code and text in res.stderr and "Traceback" not in res.output


@pytest.mark.skipif(__import__("torch").cuda.device_count() >= 4, reason="checks a GPU shortage")
def test_more_ranks_than_gpus_is_an_environment_error(advisor_home, examples_dir):
    res = advisor("profile", f"{examples_dir}/mlp.py", "--device", "cuda", "--nproc-per-node", 4)
    assert res.exit_code == 2 and "needs 4 GPUs" in res.stderr


def test_the_torchrun_command_and_environment():
    cmd = torchrun_command(2, Path("/x/settings.json"))
    assert cmd == [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                   "-m", "kernel_advisor.distributed.worker", "/x/settings.json"]
    env = child_env({"PYTHONPATH": "/mine", "NCCL_NVLS_ENABLE": "1"})
    assert env["NCCL_NVLS_ENABLE"] == "0"  # forced: the GPU hosts need NVLink SHARP off
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and env["NVSHMEM_DISABLE_NVLS"] == "1"
    root, mine = env["PYTHONPATH"].split(":")
    assert (Path(root) / "kernel_advisor" / "distributed" / "worker.py").is_file() and mine == "/mine"
    assert rank_env({"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}) == RankEnv(3, 1, 4)
    assert rank_env({}) == RankEnv(0, 0, 1)  # a plain `python -m` run


def write_record(log_dir, rank, exit_code, when, problem="p", fix="f"):
    error_path(log_dir, rank).write_text(json.dumps(
        {"rank": rank, "problem": problem, "fix": fix, "exit_code": exit_code, "time": when}))


def test_the_first_rank_to_fail_is_the_cause(tmp_path):
    write_record(tmp_path, 0, 1, 20.0, "bad.py: RuntimeError: Connection closed by peer")
    write_record(tmp_path, 1, 1, 10.0, "bad.py:13 in forward: boom", "fix the model file")
    error, keep = rank_failure(tmp_path, 2, 1)
    assert isinstance(error, UserInputError) and not keep
    assert error.one_line() == "rank 1: bad.py:13 in forward: boom — fix the model file"


@pytest.mark.parametrize("code,cls,keep", [(2, EnvironmentCapabilityError, False), (4, AdvisorError, True)])
def test_error_records_keep_their_exit_code(tmp_path, code, cls, keep):
    write_record(tmp_path, 1, code, 1.0)
    error, kept = rank_failure(tmp_path, 2, 1)
    assert type(error) is cls and int(error.exit_code) == code and kept == keep
    assert (str(tmp_path) in error.fix) == keep  # an internal error points at the logs


def test_a_rank_that_died_without_a_record(tmp_path):
    log_path(tmp_path, 1).write_text("Traceback (most recent call last):\n  File x\n"
                                     "ModuleNotFoundError: No module named 'kernel_advisor'\n")
    error, keep = rank_failure(tmp_path, 2, 1)
    assert keep and error.problem == "rank 1 exited with no result: ModuleNotFoundError: No module named 'kernel_advisor'"
    (tmp_path / "rank1.log").unlink()
    (tmp_path / "torchrun.log").write_text("ValueError: bad --nproc-per-node\n====\n")
    error, _ = rank_failure(tmp_path, 2, 2)
    assert error.problem == "the ranks failed before writing a result: ValueError: bad --nproc-per-node"


def test_error_line_skips_separators_and_profiler_chatter(tmp_path):
    log = tmp_path / "x.log"
    log.write_text("USDT:2026 profiler_stop\nsomething happened\n=====\n")
    assert error_line(log) == "something happened"
    assert error_line(tmp_path / "missing.log") == ""
