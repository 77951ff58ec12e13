"""Multi-node jobs: torchrun's rendezvous options, node directories, and `advisor merge`.

The launches simulate two nodes on one host: two `advisor profile --nnodes 2` agents, one
process each, meeting at a localhost rendezvous (gloo on CPU: slow; NCCL with one GPU per
agent: gpu). Both "nodes" share the host's memory and links, so the inter-node figures here
check the plumbing, not a network.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

import kernel_advisor.cli
from kernel_advisor.distributed.links import INTER, INTRA, link_rows, spans_nodes
from kernel_advisor.distributed.rendezvous import Rendezvous
from kernel_advisor.records.node import NodeRecord

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_multinode import run_two_nodes  # noqa: E402

runner = CliRunner()


def advisor(*args):
    return runner.invoke(kernel_advisor.cli.app, [str(a) for a in args])


@pytest.mark.parametrize("args,text", [
    (["--nnodes", 2], "--nnodes 2 needs --rdzv-endpoint HOST:PORT"),
    (["--nnodes", 2, "--rdzv-endpoint", "h:29500"], "needs --node-rank"),
    (["--nnodes", 2, "--node-rank", 2, "--rdzv-endpoint", "h:29500"], "--node-rank 2 is not below --nnodes 2"),
    (["--nnodes", 2, "--node-rank", -1, "--rdzv-endpoint", "h:29500"], "--node-rank -1 is not below"),
    (["--node-rank", 1], "--node-rank needs --nnodes 2 or more"),
    (["--rdzv-endpoint", "h:1"], "--rdzv-endpoint needs --nnodes 2 or more"),
    (["--nnodes", 0], "--nnodes must be at least 1"),
    (["--nnodes", 2, "--node-rank", 0, "--rdzv-endpoint", "nohostport"], "is not HOST:PORT"),
    (["--nnodes", 2, "--node-rank", 0, "--rdzv-endpoint", "h:70000"], "is not HOST:PORT"),
    (["--nnodes", 2, "--rdzv-backend", "etcd", "--rdzv-endpoint", "h:1"], "'etcd' is not supported"),
    (["--nnodes", 2, "--rdzv-backend", "c10d", "--node-rank", 0, "--rdzv-endpoint", "h:1"], "not used by the c10d"),
    (["--nnodes", 2, "--node-rank", 0, "--rdzv-endpoint", "h:1", "--rdzv-id", "a b"], "is not a plain job id"),
])
def test_bad_rendezvous_options_are_one_line(args, text, examples_dir, advisor_home):
    res = advisor("profile", f"{examples_dir}/mlp.py", "--device", "cpu", "--mode", "train", *args)
    assert res.exit_code == 1, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0], res.stderr


def test_torchrun_arguments():
    assert Rendezvous().torchrun_args() == ["--standalone"]
    assert Rendezvous(2, 1, "h:29500", "job").torchrun_args() == [
        "--nnodes", "2", "--rdzv-backend", "static", "--rdzv-endpoint", "h:29500", "--rdzv-id", "job", "--node-rank", "1"]
    assert "--node-rank" not in Rendezvous(4, None, "h:1", None, "c10d").torchrun_args()


def test_a_group_larger_than_a_node_spans_nodes():
    assert spans_nodes(16, 8, 16, 2) and not spans_nodes(8, 8, 16, 2)
    assert spans_nodes(float("nan"), 8, 16, 2)  # unrecorded: the world's group
    assert not spans_nodes(16, 8, 16, 1)


def test_links_on_their_own_roofs():
    import pandas as pd

    calls = pd.DataFrame({"collective": ["all_reduce"] * 3, "call": [0, 1, 2], "bytes": [1e6, 1e6, 4e6],
                          "group_size": [4, 2, 4], "shortest_s": [1e-3, 1e-4, 2e-3], "mean_s": [2e-3, 1e-4, 3e-3]})
    roofs = {INTRA: {"busbw_bytes_per_s": 1e10, "source": "datasheet"},
             INTER: {"busbw_bytes_per_s": 1e9, "source": "measured in the run"}}
    intra, inter = link_rows(calls, steps=1, copies=1, ranks_per_node=2, world_size=4, nnodes=2, roofs=roofs)
    assert (intra["link"], intra["calls"], inter["calls"]) == (INTRA, 1, 2)
    # all-reduce over 4: busbw = bytes × 2·3/4 / time, over the inter-node calls' shortest times
    assert inter["busbw_bytes_per_s"] == pytest.approx(5e6 * 1.5 / 3e-3)
    assert inter["busbw_frac_of_roof"] == pytest.approx(5e6 * 1.5 / 3e-3 / 1e9)
    assert intra["busbw_bytes_per_s"] == pytest.approx(1e6 * 1.0 / 1e-4)
    assert inter["time_per_step_s"] == pytest.approx(5e-3)


def _node(tmp: Path, name: str, node_rank: int, ranks, nnodes=2, world=2, rdzv_id="job") -> Path:
    d = tmp / name
    d.mkdir()
    rec = NodeRecord(node_rank, nnodes, world, tuple(ranks), "host", {"endpoint": "h:1", "rdzv_id": rdzv_id},
                     {"type": "cpu", "name": "cpu"}, None, "2026-01-01T00:00:00Z")
    (d / "node.json").write_text(json.dumps(rec.to_json()))
    return d


@pytest.mark.parametrize("layout,text", [
    ([("a", 0, [0]), ("b", 0, [1])], "node 0 appears twice"),
    ([("a", 0, [0])], "1 of the job's 2 nodes are missing: node 1"),
    ([("a", 0, [0]), ("b", 1, [0])], "ranks are not 0 … 1 once each"),
    ([("a", 0, [0]), ("b", 1, [1], 2, 2, "other")], "come from different jobs"),
    ([("a", 0, [0]), ("b", 1, [1])], "lacks rank0/rank.json"),
])
def test_bad_node_directories_are_one_line(tmp_path, advisor_home, layout, text):
    dirs = [_node(tmp_path, *spec) for spec in layout]
    res = advisor("merge", *dirs)
    assert res.exit_code == 1, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0], res.stderr


def test_a_directory_that_is_no_node(tmp_path, advisor_home):
    res = advisor("merge", tmp_path)
    assert res.exit_code == 1 and "holds no node.json" in res.stderr


# ---------------------------------------------------------------- two node agents on one host


def check_merged(dirs: list[Path], out: Path, backend: str) -> dict:
    res = advisor("merge", *dirs, "--out", out, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    ranks, nodes = doc["ranks"], doc["ranks"]["nodes"]
    assert ranks["world_size"] == 2 and ranks["backend"] == backend and nodes["nnodes"] == 2
    assert [n["ranks"] for n in nodes["nodes"]] == [[0], [1]]
    links = {link["link"]: link for link in nodes["links"]}
    assert links[INTER]["calls"] > 0 and links[INTRA]["calls"] == 0  # one rank per node: every call crosses
    roof = links[INTER]["roof"]
    assert roof["source"] == "measured in the run" and roof["world_size"] == 2 and roof["busbw_bytes_per_s"] > 0
    assert links[INTER]["busbw_frac_of_roof"] > 0
    meta = json.loads((out / "run.json").read_text())
    assert meta["distributed"]["nnodes"] == 2 and meta["files"]["nodes"] == "nodes.json"
    assert (out / "rank0" / "trace.json.gz").is_file() and (out / "rank1" / "trace.json.gz").is_file()
    return doc


@pytest.mark.slow
def test_two_cpu_nodes_on_one_host(tmp_path, advisor_home, examples_dir):
    dirs = run_two_nodes(Path(examples_dir) / "mlp.py", "cpu", tmp_path, [{}, {}])
    for node, d in enumerate(dirs):
        rec = NodeRecord.read(d)
        assert rec.node_rank == node and rec.ranks == (node,) and rec.internode_allreduce["backend"] == "gloo"
    check_merged(dirs, tmp_path / "merged", "gloo")


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs, one per node agent")
def test_two_gpu_nodes_on_one_host(tmp_path, advisor_home, examples_dir):
    dirs = run_two_nodes(Path(examples_dir) / "ddp_mlp.py", "cuda", tmp_path,
                         [{"CUDA_VISIBLE_DEVICES": "0"}, {"CUDA_VISIBLE_DEVICES": "1"}])
    rec = NodeRecord.read(dirs[1])
    assert rec.internode_allreduce["backend"] == "nccl" and rec.internode_allreduce["size_bytes"] == 256 << 20
    check_merged(dirs, tmp_path / "merged", "nccl")
