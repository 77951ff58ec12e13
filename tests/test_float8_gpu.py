"""The `float8` and `float8:compile` actions on an fp8-capable GPU: a bf16 MLP of Linear(4096, 4096)
layers passes the gate through torchao, and the measured record reports its error beside the speedup."""
from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn as nn
from test_actions import loaded_of

from kernel_advisor.actions.precision import FLOAT8_TOLERANCE, MIN_CAPABILITY
from kernel_advisor.experiment.engine import measure_actions
from kernel_advisor.experiment.search import SearchOptions

pytestmark = pytest.mark.gpu
# Each named action alone, timed over 10 windows: no other compile mode, no combination.
SINGLES = SearchOptions(short_windows=10, long_windows=0, warmup=2, compile_modes=(), combinations=False)
D, TOKENS = 4096, 4096


def _skip_without_fp8():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    pytest.importorskip("torchao.float8", reason="torchao is not installed (pip install torchao)")
    if torch.cuda.get_device_capability() < MIN_CAPABILITY:
        pytest.skip(f"{torch.cuda.get_device_name()} has no fp8 tensor cores (capability < 8.9)")


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(D, D), nn.GELU(), nn.Linear(D, D), nn.GELU(), nn.Linear(D, D))


def _inputs(seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(TOKENS, D, generator=g).to("cuda", torch.bfloat16)]


@pytest.mark.parametrize("mode", ["inference", "train"])
def test_float8_passes_the_gate_on_a_bf16_mlp(mode):
    _skip_without_fp8()
    loaded = loaded_of(_mlp(), lambda seed: [torch.zeros(1)])
    loaded = dataclasses.replace(loaded, model=loaded.model.to("cuda", torch.bfloat16), device=torch.device("cuda"),
                                 dtype=torch.bfloat16, inputs=_inputs(0), make_inputs=_inputs)
    m = measure_actions(loaded, mode, ["float8", "float8:compile"], SINGLES)
    for name in ("float8", "float8:compile"):
        outcome = m.outcomes[name]
        assert outcome.status == "passed", (name, outcome)
        assert "3 Linear layer(s) (4096x4096)" in outcome.applied
        doc = outcome.to_json()
        gate = doc["gate"]
        # the error is measured and reported beside the speedup: fp8 noise, well inside one e4m3 step
        assert gate["rel_err"] is not None and 0 < gate["rel_err"] < FLOAT8_TOLERANCE[0], (name, gate)
        assert gate["ref_rel_err"] is not None and gate["ref_rel_err"] < FLOAT8_TOLERANCE[0], (name, gate)
        assert gate["baseline_ref_rel_err"] < gate["ref_rel_err"]  # bf16 eager is closer to float64 than fp8
        assert doc["speedup"]["value"] > 0 and doc["verdict"]
    # the user's model is untouched: still plain bf16 nn.Linear
    assert all(type(layer) is nn.Linear and layer.weight.dtype == torch.bfloat16
               for layer in loaded.model if isinstance(layer, nn.Linear))
