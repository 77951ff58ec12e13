"""Measured advice on a CUDA device: the GPU-only actions gate and time in a real model."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest
import torch
import torch.nn as nn
from typer.testing import CliRunner

from kernel_advisor.cli import app
from kernel_advisor.experiment.engine import measure_actions
from kernel_advisor.experiment.search import SearchOptions
from test_actions import loaded_of

pytestmark = pytest.mark.gpu
# Each named action alone, timed over 10 windows: no other compile mode, no combination.
SINGLES = SearchOptions(short_windows=10, long_windows=0, warmup=2, compile_modes=(), combinations=False)
runner = CliRunner()
MODEL = os.path.join(os.path.dirname(__file__), "data", "llama_naive.py")


def _cuda(loaded, dtype=torch.float32):
    model = loaded.model.to("cuda", dtype)
    make = loaded.make_inputs
    return dataclasses.replace(loaded, model=model, device=torch.device("cuda"),
                               inputs=[t.to("cuda", dtype) for t in make(0)],
                               make_inputs=lambda s: [t.to("cuda", dtype) for t in make(s)])


def _convnet_inputs(seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(8, 3, 33, 31, generator=g)]


def test_gpu_actions_gate_and_time_on_a_conv_net():
    net = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
                        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).eval()
    loaded = _cuda(loaded_of(net, _convnet_inputs))
    names = ["cudnn_benchmark", "tf32", "channels_last", "bf16_autocast", "compile:reduce-overhead"]
    m = measure_actions(loaded, "inference", names, SINGLES)
    for name in names:
        o = m.outcomes[name]
        assert o.status == "passed", (name, o)
        assert o.speedup.low <= o.speedup.value <= o.speedup.high
    assert m.eager_step_s is not None and m.plan.outcome.status in ("passed", "not-applied")
    assert not torch.backends.cudnn.benchmark  # every flag restored


def test_recommend_measure_on_cuda(tmp_path):
    model = tmp_path / "llama_naive.py"
    shutil.copy(MODEL, model)
    run = tmp_path / "run"
    result = runner.invoke(app, ["profile", str(model), "--device", "cuda", "--dtype", "bfloat16",
                                 "--steps", "3", "--warmup", "2", "--out", str(run)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["recommend", str(run), "--measure", "--also", "compile:reduce-overhead",
                                 "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    also = doc["also"][0]["measured"]
    assert also["status"] == "passed" and also["speedup"]["value"] > 0
    assert all(r["measured"]["status"] for r in doc["recommendations"])


class _Attention(nn.Module):
    def __init__(self, d: int = 256, heads: int = 4):
        super().__init__()
        self.heads, self.qkv, self.out = heads, nn.Linear(d, 3 * d), nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, d))


def _attention_inputs(seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 1000, 256, generator=g)]  # an odd sequence length


def test_sdpa_backends_and_gemm_autotuning_gate_and_time(capfd):
    loaded = _cuda(loaded_of(_Attention().eval(), _attention_inputs), torch.bfloat16)
    names = ["sdpa_cudnn", "sdpa_flash", "compile:max-autotune-no-cudagraphs"]
    m = measure_actions(loaded, "inference", names, SINGLES)
    for name in names:
        o = m.outcomes[name]
        assert o.status == "passed", (name, o)
        assert o.speedup.low <= o.speedup.value <= o.speedup.high
    assert "AUTOTUNE" not in capfd.readouterr().err  # inductor's autotuning tables stay off stderr
    assert torch.backends.cuda.flash_sdp_enabled()  # the backend order is restored after the step
