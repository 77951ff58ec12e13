"""NCCL on two GPUs: the all-reduce calibration and `advisor profile --nproc-per-node 2`."""
import json
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import kernel_advisor.cli
from kernel_advisor.analyze.ceilings import match_device
from kernel_advisor.collect.rundir import read_table
from kernel_advisor.distributed.links import per_direction_bytes_per_s
from kernel_advisor.analyze.calibrate import measure_allreduce

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")]
DATA = Path(__file__).parent / "data"
MIB = 2**20
LAYER_BYTES = (256 * 256 + 256) * 4  # one Linear(256, 256) of ddp_tiny in fp32


def test_allreduce_busbw_is_below_the_link():
    m = measure_allreduce(2, size_bytes=64 * MIB)
    assert m.world_size == 2 and m.size_bytes == 64 * MIB
    assert m.busbw_bytes_per_s == pytest.approx(m.algbw_bytes_per_s)  # n = 2: factor 2*1/2
    spec = match_device(torch.cuda.get_device_name(0))
    if spec is None or not spec.nvlink_bytes_per_s:
        pytest.skip("no NVLink figure for this GPU")
    link = per_direction_bytes_per_s(spec.nvlink_bytes_per_s)
    assert 0.2 * link < m.busbw_bytes_per_s <= 1.05 * link, f"busbw {m.busbw_bytes_per_s / 1e9:.0f} GB/s"


def profile(tmp_path, model, *extra):
    out = tmp_path / "run"
    res = CliRunner().invoke(kernel_advisor.cli.app, [
        "profile", str(model), "--device", "cuda", "--mode", "train", "--nproc-per-node", "2",
        "--steps", "2", "--warmup", "2", "--out", str(out), *extra])
    assert res.exit_code == 0, res.output
    return out, json.loads((out / "ranks.json").read_text())


def test_ddp_with_the_files_own_buckets(advisor_home, tmp_path):
    out, doc = profile(tmp_path, DATA / "ddp_tiny_buckets.py")
    assert doc["backend"] == "nccl" and doc["wrapper"] == "user"
    assert [r["device"] for r in doc["ranks"]] == ["cuda:0", "cuda:1"]
    ar = {c["collective"]: c for c in doc["collectives"]}["all_reduce"]
    assert ar["calls_per_step"] == 4 and ar["bytes_per_call"] == LAYER_BYTES  # 0.25 MB buckets: one layer each
    assert ar["busbw_bytes_per_s"] > 0 and doc["interconnect"]["bytes_per_s"] > ar["busbw_bytes_per_s"]
    for r in (0, 1):
        calls = read_table(out / f"rank{r}" / "comms.csv")
        assert (calls["source"] == "nccl_kernel").all() and calls["bytes"].notna().all()
        assert (calls["group_size"] == 2).all()
    assert all(0.0 <= r["overlap_frac"] <= 1.0 for r in doc["ranks"])


def test_fsdp_gathers_and_scatters(advisor_home, tmp_path):
    _, doc = profile(tmp_path, DATA / "ddp_tiny.py", "--fsdp")
    assert doc["wrapper"] == "fsdp"
    by_name = {c["collective"]: c for c in doc["collectives"]}
    assert {"all_gather", "reduce_scatter"} <= set(by_name)
    # each block's parameters are gathered whole: 263168 bytes of output per call
    assert by_name["all_gather"]["bytes_per_call"] == pytest.approx(LAYER_BYTES, rel=0.01)
