"""Data-parallel actions and their measurement on a run's ranks: the pure pieces here, and (slow)
`recommend --measure` over a 2-rank gloo run with the DDP actions."""
import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from kernel_advisor import actions
from kernel_advisor.actions import NotMeasurable
from kernel_advisor.actions.data_parallel import ACTIONS, BF16_COMPRESS_RTOL, WRAPPER, _bf16_tolerance
from kernel_advisor.collect.loader import load_model
from kernel_advisor.distributed.comms import Overlap, kernel_collective, normalise_collective
from kernel_advisor.distributed.measure import measure_distributed, outcome_of
from kernel_advisor.distributed.measure_worker import _worst_over_ranks
from kernel_advisor.distributed.merge import RankResult, collective_overlap_frac

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "data" / "ddp_tiny.py"


def test_every_data_parallel_action_is_registered_and_distributed():
    names = {a.name for a in ACTIONS}
    assert names == {"ddp:bucket_cap_mb", "ddp:gradient_as_bucket_view", "ddp:bf16_compress", "fsdp:prefetch",
                     "fsdp:no_reshard_after_forward"}
    assert all(actions.is_known(n) and actions.is_distributed(n) for n in names)
    assert not actions.is_distributed("compile") and {WRAPPER[n] for n in names} == {"ddp", "fsdp"}


@pytest.mark.parametrize("name", sorted(a.name for a in ACTIONS))
def test_outside_a_process_group_they_are_not_measurable(name):
    loaded = load_model(TINY, device="cpu")
    with pytest.raises(NotMeasurable, match="--nproc-per-node"):
        actions.get_action(name).prepare(loaded, "train")


def test_bf16_compression_tolerance_is_four_bf16_roundings():
    import torch
    assert BF16_COMPRESS_RTOL == pytest.approx(4 * 2.0 ** -8)
    assert _bf16_tolerance(torch.float32)[0] == BF16_COMPRESS_RTOL


@pytest.mark.parametrize("name,collective", [
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "all_gather"),
    ("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL", "reduce_scatter"),
    ("ncclDevKernel_AllReduce_Sum_f32_RING_LL", "all_reduce")])
def test_fsdp_and_tp_kernels_are_classified(name, collective):
    assert kernel_collective(name) == collective


@pytest.mark.parametrize("name,collective", [
    ("c10d::_allgather_base_", "all_gather"), ("_allgather_base", "all_gather"),
    ("all_gather_into_tensor", "all_gather"), ("c10d::_reduce_scatter_base_", "reduce_scatter"),
    ("_reduce_scatter_base", "reduce_scatter"), ("reduce_scatter_tensor", "reduce_scatter"),
    ("_c10d_functional::all_reduce", "all_reduce"), ("gloo:all_gather", "all_gather")])
def test_fsdp_and_tp_record_function_names_are_classified(name, collective):
    assert normalise_collective(name) == collective


def test_allgather_overlap_is_summed_over_ranks():
    def rank(r, busy, hidden):
        return RankResult(r, 1, (1.0,), 1.0, pd.DataFrame(),
                          overlap_by_collective={"all_gather": Overlap(busy, busy, hidden, busy - hidden, hidden / busy)})
    # rank 0 hides 1 of 2 s, rank 1 3 of 4 s: (1 + 3) / (2 + 4)
    assert collective_overlap_frac([rank(0, 2.0, 1.0), rank(1, 4.0, 3.0)], "all_gather") == pytest.approx(4 / 6)
    assert math.isnan(collective_overlap_frac([rank(0, 2.0, 1.0)], "reduce_scatter"))


def test_gate_errors_are_the_worst_over_ranks():
    worst = _worst_over_ranks([{"draws": 2, "leaves": 9, "rel_err": 1e-3, "ref_rel_err": None,
                                "baseline_ref_rel_err": None},
                               {"draws": 2, "leaves": 9, "rel_err": 4e-3, "ref_rel_err": None,
                                "baseline_ref_rel_err": None}, None])
    assert worst["rel_err"] == 4e-3 and worst["ranks"] == 2 and _worst_over_ranks([None]) is None


def test_a_record_trial_reads_back_as_an_outcome():
    trial = {"action": "ddp:bucket_cap_mb", "status": "passed", "reason": "", "applied": "x",
             "speedup": {"value": 1.2, "low": 1.1, "high": None}, "gain_frac": 0.17, "verdict": "faster",
             "step_s": None, "gate": None, "windows": 12}
    o = outcome_of(trial)
    assert o.speedup.value == 1.2 and math.isnan(o.speedup.high) and o.to_json()["speedup"]["high"] is None


def test_actions_for_another_wrapper_are_answered_without_launching(tmp_path):
    meta = {"distributed": {"world_size": 2, "wrapper": "fsdp"}, "args": {}, "model": {}}
    out = measure_distributed(meta, tmp_path, ["ddp:bucket_cap_mb", "ddp:bf16_compress"])
    assert {o.status for o in out.values()} == {"not-applied"}
    assert "wrapped by fsdp" in out["ddp:bucket_cap_mb"].reason and not list(tmp_path.iterdir())


FSDP_EVIDENCE = {"world_size": 2, "wrapper": "fsdp", "exposed_comm_s": 1e-3, "exposed_comm_pct": 20.0,
                 "overlap_frac": 0.5, "max_comm_wait_s": 0.0, "max_comm_wait_pct": 0.0}


@pytest.mark.parametrize("allgather_overlap, fires", [(0.25, True), (0.59, True), (0.61, False), (0.95, False),
                                                      (None, False)])  # None: no all-gather (DDP)
def test_exposed_fsdp_allgathers_recommend_prefetching(allgather_overlap, fires):
    from test_recommend_support import fp32_run

    from kernel_advisor.recommend.report import action_predictions, recommend
    from kernel_advisor.recommend.schema import load_rules

    ops, seq, meta = fp32_run()
    meta["distributed"] = {**FSDP_EVIDENCE, "allgather_overlap_frac": allgather_overlap}
    report = recommend(ops, seq, meta, load_rules(), ())
    found = {f.rule_id: f for f in report.findings}
    assert ("dist-fsdp-exposed-allgather" in found) is fires
    assert "dist-exposed-communication" in found  # 20 % exposed fires it either way
    if fires:
        rec = found["dist-fsdp-exposed-allgather"].recommendations[0]
        assert rec.action == "fsdp:prefetch"
        assert rec.message.startswith(f"Only {allgather_overlap * 100:.0f} % of FSDP's all-gather time overlaps")
        assert rec.saving_per_step_s == pytest.approx(0.5e-3)  # exposed-comm: half the 1 ms exposed
        assert "fsdp:prefetch" in {p["action"] for p in action_predictions(report)}


@pytest.mark.slow
def test_recommend_measure_on_a_two_rank_gloo_run(tmp_path):
    env = {"ADVISOR_HOME": str(tmp_path / "home"), "PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
           "HOME": str(tmp_path)}
    import os
    env = {**os.environ, **env}
    run = tmp_path / "run"
    prof = subprocess.run([sys.executable, "-m", "kernel_advisor", "profile", str(TINY), "--device", "cpu",
                           "--mode", "train", "--nproc-per-node", "2", "--steps", "3", "--warmup", "2",
                           "--out", str(run)], env=env, capture_output=True, text=True, timeout=300)
    assert prof.returncode == 0, prof.stderr
    ddp = ["ddp:bucket_cap_mb", "ddp:gradient_as_bucket_view", "ddp:bf16_compress"]
    rec = subprocess.run([sys.executable, "-m", "kernel_advisor", "recommend", str(run), "--measure",
                          "--budget-s", "5", "--format", "json", *[x for a in ddp for x in ("--also", a)]],
                         env=env, capture_output=True, text=True, timeout=400)
    assert rec.returncode == 0, rec.stderr
    doc = json.loads(rec.stdout)
    by_action = {a["action"]: a for a in doc["actions"]}
    for name in ddp[:2]:
        m = by_action[name]["measured"]
        assert "predicted_gain_frac" in by_action[name]
        assert m["status"] == "passed", m
        s = m["speedup"]
        assert s["low"] <= s["value"] <= s["high"] and m["gate"]["ranks"] == 2 and m["gate"]["draws"] == 2
        assert m["gate"]["rel_err"] <= 1e-5  # bucketing reorders nothing a float32 sum of 2 ranks sees
    assert by_action["ddp:bf16_compress"]["measured"]["status"] == "not-measurable"  # gloo: no bf16 hook
    record = json.loads((run / "distributed_experiments.json").read_text())
    assert record["world_size"] == 2 and record["wrapper"] == "ddp" and record["windows"] >= 1
    assert sorted(t["action"] for t in record["trials"]) == sorted(ddp)
