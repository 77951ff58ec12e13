"""Actions: each one keeps the model's numbers, undoes itself, and says why when it does not apply."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from kernel_advisor import actions
from kernel_advisor.actions import NotApplicable, NotMeasurable, get_action
from kernel_advisor.actions.flags import backend_flags, current
from kernel_advisor.actions.module_rewrites import padded_size
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.user_code import map_tensors


def loaded_of(model: nn.Module, make_inputs) -> LoadedModel:
    """A LoadedModel for an in-test module on the CPU (no model file)."""
    return LoadedModel(path=Path("in_test.py"), sha256="", entry=None, module=None, model=model,
                       inputs=make_inputs(0), loss_fn=None, device=torch.device("cpu"), dtype=None,
                       make_inputs=make_inputs)


def seeded(*shape, dtype=torch.float32):
    def make(seed: int) -> list:
        g = torch.Generator().manual_seed(seed)
        return [torch.randn(*shape, generator=g).to(dtype)]
    return make


class NaiveAttention(nn.Module):
    """q @ k^T / sqrt(d) → causal masked_fill(-inf) → softmax → @ v, as research code writes it."""

    def __init__(self, d: int = 24, heads: int = 3, causal: bool = True):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, -1).transpose(1, 2) for z in self.qkv(x).split(d, dim=-1))
        scores = q @ k.transpose(-2, -1) * (q.shape[-1] ** -0.5)
        if self.causal:
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            scores = scores.masked_fill(mask, float("-inf"))
        y = scores.softmax(dim=-1) @ v
        return self.out(y.transpose(1, 2).reshape(b, t, d))


class HandRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(dim) + 0.5)

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


class Block(nn.Module):
    def __init__(self, d: int = 24, causal: bool = True):
        super().__init__()
        self.norm = HandRMSNorm(d)
        self.attn = NaiveAttention(d, causal=causal)

    def forward(self, x):
        return x + self.attn(self.norm(x))


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-5) -> bool:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm()) < rtol


def _run(loaded: LoadedModel, variant, seed: int = 3) -> torch.Tensor:
    with torch.no_grad(), variant.context():
        return variant.model(*variant.convert_inputs(loaded.make_inputs(seed)))


# ---------------------------------------------------------------- sdpa


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("batch,seq", [(2, 7), (1, 13)])  # odd sequence lengths
def test_sdpa_rewrites_naive_attention_and_keeps_outputs(causal, batch, seq):
    loaded = loaded_of(Block(causal=causal).eval(), seeded(batch, seq, 24))
    v = get_action("sdpa").prepare(loaded, "inference")
    with torch.no_grad():
        expected = loaded.model(*loaded.make_inputs(3))
    got = _run(loaded, v)
    routed, fell_back = v.counters()
    assert routed >= 1 and fell_back == 0
    assert _close(got, expected)
    assert "forward" not in loaded.model.attn.__dict__  # the swap is gone between steps
    v.close()


def test_sdpa_other_shape_falls_back_to_the_original_forward():
    loaded = loaded_of(Block().eval(), seeded(2, 7, 24))
    v = get_action("sdpa").prepare(loaded, "inference")
    x = torch.randn(2, 9, 24)  # not the captured shape
    with torch.no_grad(), v.context():
        got = v.model(x)
    with torch.no_grad():
        assert _close(got, loaded.model(x))
    assert v.counters()[1] >= 1


def test_sdpa_gradients_match_in_train_mode():
    loaded = loaded_of(Block(), seeded(2, 7, 24))
    v = get_action("sdpa").prepare(loaded, "train")
    x = loaded.make_inputs(5)[0]
    loaded.model(x).square().sum().backward()
    expected = {n: p.grad.clone() for n, p in loaded.model.named_parameters()}
    loaded.model.zero_grad()
    with v.context():
        loaded.model(x).square().sum().backward()
    for name, p in loaded.model.named_parameters():
        assert _close(p.grad, expected[name], 1e-4), name


def test_sdpa_not_applicable_without_attention():
    loaded = loaded_of(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), seeded(3, 8))
    with pytest.raises(NotApplicable, match="no attention"):
        get_action("sdpa").prepare(loaded, "inference")


# ---------------------------------------------------------------- rms_norm_module


def test_rms_norm_module_swaps_hand_written_norms():
    loaded = loaded_of(Block().eval(), seeded(2, 7, 24))
    v = get_action("rms_norm_module").prepare(loaded, "inference")
    with torch.no_grad():
        expected = loaded.model(*loaded.make_inputs(3))
    assert _close(_run(loaded, v), expected)
    assert v.counters() == (1, 0)


def test_rms_norm_module_leaves_nn_rmsnorm_alone():
    loaded = loaded_of(nn.Sequential(nn.RMSNorm(16)), seeded(3, 16))
    with pytest.raises(NotApplicable, match="no hand-written RMSNorm"):
        get_action("rms_norm_module").prepare(loaded, "inference")


# ---------------------------------------------------------------- pad_gemm


@pytest.mark.parametrize("n,itemsize,expected", [(333, 4, 336), (333, 2, 336), (1000, 2, 1000), (1, 1, 16)])
def test_padded_size(n, itemsize, expected):
    # 16 bytes = 4 float32 / 8 bf16 / 16 int8 elements: 333 → 336 (84·4, 42·8); 1000 = 125·8 stays
    assert padded_size(n, itemsize) == expected


@pytest.mark.parametrize("mode", ["inference", "train"])
def test_pad_gemm_keeps_outputs_and_gradients(mode):
    model = nn.Sequential(nn.Linear(333, 101), nn.GELU(), nn.Linear(101, 7))
    loaded = loaded_of(model, seeded(5, 333))
    v = get_action("pad_gemm").prepare(loaded, mode)
    x = loaded.make_inputs(2)[0]
    train = mode == "train"
    with torch.set_grad_enabled(train):
        expected = model(x)
        with v.context():
            got = model(x)
    assert got.shape == expected.shape and _close(got, expected)
    if train:
        grads = torch.autograd.grad(expected.sum(), list(model.parameters()))
        padded_grads = torch.autograd.grad(got.sum(), list(model.parameters()))
        assert all(_close(g, e, 1e-4) for g, e in zip(padded_grads, grads))


def test_pad_gemm_not_applicable_when_aligned():
    loaded = loaded_of(nn.Linear(64, 32), seeded(2, 64))
    with pytest.raises(NotApplicable, match="aligned"):
        get_action("pad_gemm").prepare(loaded, "inference")


# ---------------------------------------------------------------- channels_last


def test_channels_last_copies_the_model_and_converts_4d_inputs():
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 5, 1)).eval()
    loaded = loaded_of(model, seeded(2, 3, 9, 11))
    v = get_action("channels_last").prepare(loaded, "inference")
    (x,) = v.convert_inputs(loaded.make_inputs(1))
    assert x.is_contiguous(memory_format=torch.channels_last)
    assert not model[0].weight.is_contiguous(memory_format=torch.channels_last)  # the user's model untouched
    with torch.no_grad():
        assert _close(_run(loaded, v), model(*loaded.make_inputs(3)))


def test_channels_last_not_applicable_without_convolutions():
    with pytest.raises(NotApplicable, match="4-D"):
        get_action("channels_last").prepare(loaded_of(nn.Linear(4, 4), seeded(2, 4)), "inference")


# ---------------------------------------------------------------- flags, precision, devices


def test_backend_flags_are_restored_even_on_error():
    before = current("cudnn.benchmark")
    with pytest.raises(RuntimeError):
        with backend_flags({"cudnn.benchmark": not before}):
            assert current("cudnn.benchmark") == (not before)
            raise RuntimeError("boom")
    assert current("cudnn.benchmark") == before


@pytest.mark.parametrize("name", ["cudnn_benchmark", "tf32", "compile:reduce-overhead", "sdpa_cudnn",
                                  "sdpa_flash"])
def test_cuda_only_actions_say_so_on_cpu(name):
    with pytest.raises(NotApplicable, match="CUDA|CPU"):
        get_action(name).prepare(loaded_of(nn.Linear(4, 4), seeded(2, 4)), "inference")


def test_bf16_autocast_runs_float32_model_in_bfloat16():
    loaded = loaded_of(nn.Linear(16, 8), seeded(4, 16))
    v = get_action("bf16_autocast").prepare(loaded, "inference")
    got = _run(loaded, v)
    assert got.dtype == torch.bfloat16
    with torch.no_grad():
        assert _close(got, loaded.model(*loaded.make_inputs(3)), 2e-2)


def test_bf16_autocast_not_applicable_to_a_bfloat16_model():
    loaded = loaded_of(nn.Linear(16, 8).to(torch.bfloat16), seeded(4, 16, dtype=torch.bfloat16))
    with pytest.raises(NotApplicable, match="not float32"):
        get_action("bf16_autocast").prepare(loaded, "inference")


def test_triton_kernel_is_not_measurable_on_cpu():
    with pytest.raises(NotMeasurable, match="interpreter"):
        get_action("kernel:triton.rms_norm").prepare(loaded_of(Block(), seeded(2, 7, 24)), "inference")


def test_unknown_kernel_is_not_applicable():
    with pytest.raises(NotApplicable, match="no bundled kernel"):
        get_action("kernel:nope").prepare(loaded_of(Block(), seeded(2, 7, 24)), "inference")


# ---------------------------------------------------------------- registry


def test_registry_names():
    names = actions.action_names()
    for expected in ("sdpa", "rms_norm_module", "channels_last", "cudnn_benchmark", "tf32", "bf16_autocast",
                     "pad_gemm", "compile", "compile:reduce-overhead", "compile:max-autotune-no-cudagraphs",
                     "sdpa_cudnn", "sdpa_flash"):
        assert expected in names
    assert actions.is_known("kernel:triton.softmax") and actions.is_known("none")
    assert not actions.is_known("kernel:") and not actions.is_known("fp4")
    with pytest.raises(KeyError, match="unknown action"):
        get_action("fp4")


def test_sdpa_backend_order_puts_the_chosen_backend_first_and_keeps_the_rest():
    from kernel_advisor.actions.sdpa import priority

    assert priority("FLASH_ATTENTION") == ["FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION", "MATH"]
    assert priority("CUDNN_ATTENTION") == ["CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION", "MATH"]
