"""Structural detection of RMSNorm / SwiGLU / residual+norm, and module swaps that restore cleanly."""
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from kernel_advisor.collect.loader import load_model
from kernel_advisor.trykernel.capture import CallLog
from kernel_advisor.trykernel.candidates import default_tolerance
from kernel_advisor.trykernel.patterns import find_patterns
from kernel_advisor.trykernel.substitute_module import ModuleSwap, swap_modules

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPT = os.path.join(REPO, "examples", "gpt_block.py")
ALL = ("float32", "float16", "bfloat16")


def rms(x, normalized_shape, weight, eps):
    y = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + eps)
    return (y * weight.double()).to(x.dtype)


def swiglu(a, b):
    return (F.silu(a.double()) * b.double()).to(a.dtype)


def add_rms(x, residual, normalized_shape, weight, eps):
    s = x + residual
    return rms(s, normalized_shape, weight, eps), s


def add_ln(x, residual, normalized_shape, weight, bias, eps):
    s = x + residual
    return F.layer_norm(s.double(), normalized_shape, weight.double(), bias.double(), eps).to(x.dtype), s


FNS = {"rmsnorm-module": rms, "swiglu-mlp": swiglu, "residual-rmsnorm": add_rms, "residual-layernorm": add_ln}


def swaps_for(matches, logs):
    return [ModuleSwap(m, FNS[m.pattern], logs.setdefault(m.pattern, CallLog(m.pattern)), ALL, True,
                       default_tolerance) for m in matches]


@pytest.mark.parametrize("dtype", ["keep", "bfloat16"])
def test_gpt_block_patterns_are_found(dtype):
    model = load_model(GPT, device="cpu", dtype=dtype).model
    found = [(m.pattern, m.path) for m in find_patterns(model)]
    # 2 CPU layers: norm1/norm2 per block + the final norm; one SwiGLU and one add->norm2 per block
    assert found == [("rmsnorm-module", "blocks.0.norm1"), ("rmsnorm-module", "blocks.0.norm2"),
                     ("rmsnorm-module", "blocks.1.norm1"), ("rmsnorm-module", "blocks.1.norm2"),
                     ("rmsnorm-module", "norm"), ("swiglu-mlp", "blocks.0.mlp"), ("swiglu-mlp", "blocks.1.mlp"),
                     ("residual-rmsnorm", "blocks.0"), ("residual-rmsnorm", "blocks.1")]


def test_gpt_block_swaps_run_and_are_restored():
    model = load_model(GPT, device="cpu").model.eval()
    x = torch.randn(2, 7, 256, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        before = model(x)
    logs: dict[str, CallLog] = {}
    with torch.no_grad(), swap_modules(swaps_for(find_patterns(model), logs), check=True):
        swapped = model(x)
    # norm2 is folded into add_rms_norm: 2 norm1 + the final norm go through rmsnorm-module
    assert {k: v.candidate_calls for k, v in logs.items()} == {
        "rmsnorm-module": 3, "swiglu-mlp": 2, "residual-rmsnorm": 2}
    assert all(not v.failures and not v.fallback_reasons for v in logs.values())
    torch.testing.assert_close(swapped, before, rtol=1e-5, atol=1e-5)
    assert not any("forward" in vars(m) for m in model.modules())  # every instance patch removed
    with torch.no_grad():
        assert torch.equal(model(x), before)  # bit-identical baseline again


def test_swaps_are_restored_after_an_exception():
    model = load_model(GPT, device="cpu").model
    with pytest.raises(RuntimeError, match="boom"):
        with swap_modules(swaps_for(find_patterns(model), {}), check=False):
            assert "forward" in vars(model.blocks[0].norm1)
            raise RuntimeError("boom")
    assert not any("forward" in vars(m) for m in model.modules())


class MeanNorm(nn.Module):
    """A LayerNorm written by hand: subtracts the mean, so it is not an RMSNorm."""

    def __init__(self, d):
        super().__init__()
        self.eps = 1e-5
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        x = x - x.mean(-1, keepdim=True)
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class GemmaNorm(nn.Module):
    """(1 + weight) scaling: structurally an RMSNorm, numerically not the standard one."""

    def __init__(self, d):
        super().__init__()
        self.eps = 1e-6
        self.weight = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return (1 + self.weight) * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class HFNorm(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.variance_epsilon = 1e-6
        self.scale = nn.Parameter(torch.ones(d))

    def forward(self, hidden):
        var = hidden.float().pow(2).mean(-1, keepdim=True)
        return self.scale * (hidden * torch.rsqrt(var + self.variance_epsilon)).to(hidden.dtype)


@pytest.mark.parametrize("module, found", [(MeanNorm(7), False), (GemmaNorm(7), False), (HFNorm(127), True),
                                           (nn.RMSNorm(7), True), (nn.LayerNorm(7), False)])
def test_rmsnorm_detection_by_structure_and_probe(module, found):
    assert [m.pattern for m in find_patterns(module)] == (["rmsnorm-module"] if found else [])


class GatedMLP(nn.Module):
    def __init__(self, d, h, act=F.silu, dropout=False):
        super().__init__()
        self.gate, self.up, self.down = nn.Linear(d, h), nn.Linear(d, h), nn.Linear(h, d)
        self.act, self.drop = act, nn.Dropout(0.1) if dropout else None

    def forward(self, x):
        h = self.act(self.gate(x)) * self.up(x)
        return self.down(self.drop(h) if self.drop is not None else h)


@pytest.mark.parametrize("mlp, found", [(GatedMLP(8, 24), True), (GatedMLP(8, 24, act=F.gelu), False),
                                        (GatedMLP(8, 24, dropout=True), False)])
def test_swiglu_detection_is_exact(mlp, found):
    assert [m.pattern for m in find_patterns(mlp)] == (["swiglu-mlp"] if found else [])


class PostNormBlock(nn.Module):
    """h = x + fc(x) is used *between* the add and the norm: the fused call must come first."""

    def __init__(self, d):
        super().__init__()
        self.fc, self.ln = nn.Linear(d, d), nn.LayerNorm(d)

    def forward(self, x):
        h = x + self.fc(x)
        side = h * 0.5
        return self.ln(h) + side + h


@pytest.mark.parametrize("d", [1, 7, 127])
def test_residual_layernorm_rewrite_keeps_the_sum_for_its_other_users(d):
    block = PostNormBlock(d)
    x = torch.randn(3, d)
    matches = find_patterns(block)
    assert [(m.pattern, m.norm_path) for m in matches] == [("residual-layernorm", "ln")]
    logs: dict[str, CallLog] = {}
    with torch.no_grad():
        want = block(x)
        with swap_modules(swaps_for(matches, logs), check=True):
            got = block(x)
    assert logs["residual-layernorm"].candidate_calls == 1
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_swapped_modules_train_with_gradients():
    block = PostNormBlock(16)
    x = torch.randn(4, 16, requires_grad=True)
    block(x).sum().backward()
    want = [p.grad.clone() for p in block.parameters()]
    block.zero_grad()
    with swap_modules(swaps_for(find_patterns(block), {}), check=False):
        block(x).sum().backward()  # the pure-torch candidate is autograd-aware
    for p, w in zip(block.parameters(), want):
        torch.testing.assert_close(p.grad, w, rtol=1e-5, atol=1e-5)


def test_unsupported_inputs_fall_back_to_the_module():
    model = HFNorm(8)
    logs: dict[str, CallLog] = {}
    with torch.no_grad(), swap_modules(swaps_for(find_patterns(model), logs), check=False):
        out = model(torch.randn(2, 8, dtype=torch.float64).float().t().contiguous().t())  # non-contiguous
    assert logs["rmsnorm-module"].candidate_calls == 0
    assert logs["rmsnorm-module"].fallback_reasons == {"non-contiguous input": 1}
    assert out.shape == (2, 8)
