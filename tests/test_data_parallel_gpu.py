"""NCCL on two GPUs: FSDP2's and tensor parallelism's collectives found in real traces, and the
bf16 compression hook's gate on fp32 gradients (`recommend --measure`'s rank measurement).

Each test is one torchrun launch of a small model with few steps."""
import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import kernel_advisor.cli
from kernel_advisor.actions.data_parallel import BF16_COMPRESS_RTOL
from kernel_advisor.collect.rundir import read_table
from kernel_advisor.distributed.measure import measure_distributed

pytestmark = [pytest.mark.gpu, pytest.mark.slow,
              pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")]
REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "data" / "ddp_tiny.py"
TP_MLP = REPO / "examples" / "tp_mlp.py"
NCCL_KERNEL = {"all_gather": "ncclDevKernel_AllGather", "reduce_scatter": "ncclDevKernel_ReduceScatter",
               "all_reduce": "ncclDevKernel_AllReduce"}


def profile(out: Path, model: Path, *extra: str) -> dict:
    res = CliRunner().invoke(kernel_advisor.cli.app, [
        "profile", str(model), "--device", "cuda", "--nproc-per-node", "2", "--steps", "2", "--warmup", "2",
        "--out", str(out), *extra])
    assert res.exit_code == 0, res.output
    return json.loads((out / "ranks.json").read_text())


def nccl_calls(out: Path, rank: int, collective: str):
    calls = read_table(out / f"rank{rank}" / "comms.csv")
    return calls[calls["collective"] == collective]


def test_fsdp2_gathers_and_scatters_on_nccl(advisor_home, tmp_path):
    out = tmp_path / "fsdp"
    doc = profile(out, TINY, "--mode", "train", "--fsdp")
    assert doc["backend"] == "nccl" and doc["wrapper"] == "fsdp"
    families = {c["collective"]: c for c in doc["collectives"]}
    for name in ("all_gather", "reduce_scatter"):
        assert families[name]["calls_per_step"] >= 4  # one per sharded block at least
        assert families[name]["busbw_bytes_per_s"] > 0
        for r in (0, 1):
            calls = nccl_calls(out, r, name)
            assert len(calls) and (calls["source"] == "nccl_kernel").all()
            assert calls["name"].str.startswith(NCCL_KERNEL[name]).all()
            assert calls["bytes"].notna().all() and (calls["group_size"] == 2).all()
    for r in (0, 1):
        by_family = json.loads((out / f"rank{r}" / "rank.json").read_text())["rank"]["overlap_by_collective"]
        gathers = by_family["all_gather"]
        assert gathers["comm_busy_s"] > 0 and 0.0 <= gathers["overlap_frac"] <= 1.0
    frac = json.loads((out / "run.json").read_text())["distributed"]["allgather_overlap_frac"]
    assert frac is not None and 0.0 <= frac <= 1.0


def test_tensor_parallel_forward_all_reduces_once_per_block(advisor_home, tmp_path):
    import importlib.util
    spec = importlib.util.spec_from_file_location("tp_mlp", TP_MLP)
    tp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tp)
    out = tmp_path / "tp"
    doc = profile(out, TP_MLP, "--mode", "inference")  # forward only: the row-parallel outputs' all-reduces
    assert doc["backend"] == "nccl" and doc["wrapper"] == "user"
    ar = {c["collective"]: c for c in doc["collectives"]}["all_reduce"]
    # each block's down-projection sums its partial activations: BATCH x WIDTH of bf16 per call
    assert ar["calls_per_step"] == tp.DEPTH
    assert ar["bytes_per_call"] == tp.BATCH * tp.WIDTH * torch.finfo(tp.DTYPE).bits // 8
    assert ar["busbw_bytes_per_s"] > 0
    for r in (0, 1):
        calls = nccl_calls(out, r, "all_reduce")
        assert len(calls) == 2 * tp.DEPTH  # 2 profiled steps
        assert calls["name"].str.startswith(NCCL_KERNEL["all_reduce"]).all()


def test_bf16_compression_passes_its_gate_on_fp32_gradients(tmp_path):
    meta = {"model": {"file": str(TINY)}, "args": {"device": "cuda", "nproc_per_node": 2, "dtype": "keep", "seed": 0},
            "distributed": {"world_size": 2, "wrapper": "ddp"}}
    out = measure_distributed(meta, tmp_path, ["ddp:bf16_compress"], budget_s=5.0)
    o = out["ddp:bf16_compress"]
    assert o.status == "passed", o.reason
    assert "bf16_compress_hook" in o.applied
    # within four bf16 roundings, and far from an fp32 all-reduce's agreement: the hook did round
    assert 1e-5 < o.gate["rel_err"] <= BF16_COMPRESS_RTOL and o.gate["ranks"] == 2
    assert o.speedup.low <= o.speedup.value <= o.speedup.high
    record = json.loads((tmp_path / "distributed_experiments.json").read_text())
    assert record["backend"] == "nccl" and record["wrapper"] == "ddp" and record["windows"] >= 1
