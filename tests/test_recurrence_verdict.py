"""Recurrent layers below the limiter are "sequential": a chain of per-step latencies, with
rungs of their own (rules/recurrence.yaml)."""
from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest
import torch
import torch.nn as nn

import kernel_advisor as ka
from kernel_advisor.analyze import roofline as R
from kernel_advisor.analyze.ceilings import make_ceilings
from kernel_advisor.pipeline import recommendations_document
from kernel_advisor.recommend.evidence import RunContext, op_evidence

# bf16/fp16 2e14, fp32 1e13 FLOP/s; 1e12 B/s; 100 SMs
CEIL = make_ceilings(
    "Test GPU", {"fp32": (1e13, "datasheet"), "tf32": (1e14, "datasheet"), "fp16_tc": (2e14, "datasheet"),
                 "bf16_tc": (2e14, "datasheet"), "fp64": (5e12, "datasheet")},
    bandwidth=(1e12, "datasheet"), l2=(50 * 2**20, "datasheet"), sm_count=(100, "datasheet"))
RUN = {"device_busy_frac": 0.95, "settings": {}}
SIZE = {"float32": 4, "bfloat16": 2, "float16": 2}


def _gru_row(t, b, i, h, dtype, per_call_s, batch_first=False):
    """One aten::gru row: 1 layer, 1 direction, biases; input (T, B, I), or (B, T, I)."""
    x = [b, t, i] if batch_first else [t, b, i]
    shapes = [x, [1, b, h], [[3 * h, i], [3 * h, h], [3 * h], [3 * h]], [], [], [], [], [], []]
    return {"name": "aten::gru", "kind": "op", "input_shapes": json.dumps(shapes),
            "input_dtypes": json.dumps([dtype, dtype, "TensorList", *["scalar"] * 6]),
            "concrete_inputs": json.dumps(["", "", "", "True", "1", "0.", "False", "False", str(batch_first)]),
            "calls": 4, "device_time_total_s": 4 * per_call_s, "device_time_per_call_s": per_call_s,
            "cpu_time_total_s": 4e-6, "kernel_time_per_launch_s": 3e-6, "max_blocks": 64}


def _gru_flops(t, b, i, h):
    # 2 * N * (3H * I + 3H * H) for the GEMMs, (10 + 6 for the biases) * N * H for the gates
    n = t * b
    return 2 * n * (3 * h * i + 3 * h * h) + 16 * n * h


def _gru_bytes(t, b, i, h, size):
    # x, h0, w_ih, w_hh, 2 biases read; output and hy written
    return size * (t * b * i + b * h + 3 * h * i + 3 * h * h + 6 * h + t * b * h + b * h)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("t, b, i, h", [(128, 64, 256, 256), (512, 10, 128, 256), (16, 2, 8, 16)])
def test_a_recurrence_below_the_limiter_is_sequential(t, b, i, h, dtype):
    # e.g. (128, 64, 256, 256): N = 8192 rows, 2 * 8192 * (196,608 + 196,608) = 6,442,450,944
    # GEMM FLOPs + 16 * 8192 * 256 = 33,554,432 for the gates
    assert _gru_flops(128, 64, 256, 256) == 6_442_450_944 + 33_554_432
    flops, nbytes = _gru_flops(t, b, i, h), _gru_bytes(t, b, i, h, SIZE[dtype])
    peak = 1e13 if dtype == "float32" else 2e14
    roof_s = max(flops / peak, nbytes / 1e12)
    row = _gru_row(t, b, i, h, dtype, per_call_s=roof_s / 0.21)  # 21 % of the roof
    out = R.classify(pd.DataFrame([row]), CEIL, RUN).iloc[0]
    assert (out["flops_per_call"], out["bytes_per_call"]) == (flops, nbytes)
    assert out["efficiency_frac"] == pytest.approx(0.21)
    assert out["verdict"] == "sequential"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_recurrence_at_its_roof_keeps_the_roof_verdict(dtype):
    t, b, i, h = 128, 64, 256, 256
    peak = 1e13 if dtype == "float32" else 2e14
    row = _gru_row(t, b, i, h, dtype, per_call_s=_gru_flops(t, b, i, h) / peak / 0.8)
    assert R.classify(pd.DataFrame([row]), CEIL, RUN).iloc[0]["verdict"] == "compute-bound"


@pytest.mark.parametrize("batch_first", [False, True])
def test_the_latency_per_time_step_is_the_call_over_its_steps(batch_first):
    row = _gru_row(128, 64, 256, 256, "float16", per_call_s=2.56e-3, batch_first=batch_first)
    ctx = RunContext(steps=1, step_s=1e-2, device_time_per_step_s=1e-2, device_busy_per_step_s=1e-2,
                     device_type="cuda", device_name="Test GPU", capability=(9, 0), settings={},
                     ceilings={}, model_file=None, mode="inference", distributed={})
    ev = op_evidence(row, ctx)
    # 128 time steps x 1 layer; 2.56 ms / 128 = 20 us a step
    assert ev["time_steps"] == 128 and ev["time_step_s"] == pytest.approx(20e-6)
    assert op_evidence({**row, "name": "aten::mm"}, ctx)["time_steps"] is None


@pytest.fixture(scope="module")
def gru_run(tmp_path_factory):
    model = nn.GRU(16, 32, num_layers=2, bidirectional=True, batch_first=True)
    return ka.profile(model, [torch.randn(4, 24, 16)], device="cpu", steps=2, warmup=1,
                      out=tmp_path_factory.mktemp("runs") / "gru")


def test_a_profiled_gru_on_cpu_is_sequential_with_its_rungs(gru_run):
    (row,) = gru_run.ops.loc[gru_run.ops["name"] == "aten::gru"].to_dict("records")
    assert row["verdict"] == "sequential", row["efficiency_frac"]
    _, doc = recommendations_document(gru_run, None, top=50)
    fired = {r["rule_id"]: r for r in doc["recommendations"]}
    assert {"lib-rnn-batch", "compile-rnn-custom-cell"} <= set(fired)
    assert "lib-rnn-persistent" not in fired  # cuDNN's: CUDA only
    # 24 time steps x 2 layers
    assert "48 dependent cell steps" in fired["lib-rnn-batch"]["message"]
    assert fired["compile-rnn-custom-cell"]["estimated_gain_per_step_s"] > 0


def test_on_cuda_the_persistent_kernel_rung_is_offered_with_a_gain(gru_run):
    # the same rows as a CUDA run of capability 9.0 reads them
    meta = {**gru_run.meta, "device": {**gru_run.meta["device"], "type": "cuda", "capability": [9, 0]}}
    _, doc = recommendations_document(dataclasses.replace(gru_run, meta=meta), None, top=50)
    (rec,) = [r for r in doc["recommendations"] if r["rule_id"] == "lib-rnn-persistent"]
    assert rec["gain_model"] == "fraction" and rec["estimated_gain_per_step_s"] > 0
    assert "hidden_size <= 192" in rec["message"]
