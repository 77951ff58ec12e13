"""The fitted normal tail behind the 16-bit erf-GELU kernels (reference_kernels/normal_tail.py).

CPU: the coefficients' accuracy, that the fit reproduces them, that the Triton and CUDA
sources carry exactly these literals, and the Triton helper under the interpreter.
GPU: Triton gelu and CUDA bias_gelu in fp16/bf16 against the correctly rounded fp64 result.
"""
import math
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl

from reference_kernels import normal_tail
from reference_kernels.triton.gelu import _normal_cdf16

KERNELS = Path(normal_tail.__file__).resolve().parent
SOURCES = (KERNELS / "triton" / "gelu.py", KERNELS / "cuda" / "device_math.h")


def test_coefficients_meet_their_error_bound():
    assert normal_tail.max_rel_error() <= normal_tail.MAX_REL_ERROR


def test_fit_reproduces_an_equally_good_polynomial():
    fitted = normal_tail.fit_log2_normal_tail()
    assert len(fitted) == normal_tail.DEGREE + 1
    assert normal_tail.max_rel_error(fitted) <= normal_tail.MAX_REL_ERROR


@pytest.mark.parametrize("a, expected", [
    (0.0, 0.5),              # Phi(0) = 1/2
    (1.0, 0.15865525393),    # Phi(-1) = erfc(1/sqrt 2)/2
    (3.0, 1.3498980316e-3),  # Phi(-3)
    (5.0, 2.8665157187e-7),  # Phi(-5): the tail keeps its relative accuracy
])
def test_tail_hand_worked(a, expected):
    got = float(normal_tail.phi_tail_float32(torch.tensor([a]))[0])
    assert got == pytest.approx(expected, rel=normal_tail.MAX_REL_ERROR)


@pytest.mark.parametrize("source", SOURCES, ids=lambda p: p.name)
def test_kernel_sources_carry_the_fitted_literals(source):
    text = source.read_text()
    for literal in normal_tail.format_coeffs(normal_tail.LOG2_PHI_TAIL):
        assert re.search(re.escape(literal) + r"f?\b", text), (source.name, literal)
    assert "6.0" in text  # the clamp, normal_tail.CLAMP


@triton.jit
def _cdf(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, _normal_cdf16(x), mask=offs < n)


def test_triton_normal_cdf_helper():
    dev = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: the interpreter
    x = torch.linspace(-6.0, 6.0, 1201, device=dev)
    y = torch.empty_like(x)
    _cdf[(1,)](x, y, x.numel(), BLOCK=2048)
    exact = torch.tensor([0.5 * math.erfc(-v / math.sqrt(2.0)) for v in x.double().tolist()],
                         dtype=torch.float64)
    rel = ((y.cpu().double() - exact) / exact).abs()
    assert float(rel.max()) <= 2 * normal_tail.MAX_REL_ERROR  # + float32 rounding of 1 - tail


def _rounding_mismatches(out: torch.Tensor, x: torch.Tensor) -> tuple[float, float]:
    """(share of elements that differ from fp64 gelu rounded to out's dtype, largest such
    difference in units of that dtype's spacing at the value)."""
    exact = F.gelu(x.double())
    rounded = exact.to(out.dtype).double()
    diff = (out.double() - rounded).abs()
    spacing = torch.finfo(out.dtype).eps * rounded.abs().clamp_min(torch.finfo(out.dtype).tiny)
    return float((diff > 0).double().mean()), float((diff / spacing).max())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("impl", ["triton", "cuda"])
def test_16bit_gelu_rounds_like_the_exact_value(impl, dtype):
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    # Inputs in [-6, 8] (the clamp to 8): 16-bit outputs agree with the correctly rounded
    # fp64 gelu except at near-ties (the fit's ~6e-6 vs a 2^-8 / 2^-11 ulp: well under 1 % of
    # elements), never by more than one ulp. Below -6 the kernels return -0, as eager's
    # float32 erf does from about -5.5 on (bf16 could hold gelu(-7) = -9e-12).
    x = torch.linspace(-6.0, 8.0, 350001, device="cuda").to(dtype).unique()
    if impl == "triton":
        from reference_kernels.triton.gelu import gelu
        out = gelu(x)
    else:
        from reference_kernels.cuda.bias_act import bias_gelu
        x = x[: x.numel() // 8 * 8].view(-1, 8)
        out = bias_gelu(x, torch.zeros(8, device="cuda", dtype=dtype))
    share, worst_ulps = _rounding_mismatches(out, x)
    assert share <= 0.01, share
    assert worst_ulps <= 1.0 + 1e-9, worst_ulps
    tail = torch.tensor([-6.5, -7.0, -100.0, -float("inf")] * 2, device="cuda", dtype=dtype)
    if impl == "triton":
        tail_out = gelu(tail)
    else:
        tail_out = bias_gelu(tail.view(1, 8), torch.zeros(8, device="cuda", dtype=dtype)).view(-1)
    finite = torch.isfinite(tail)
    assert (tail_out[finite] == 0).all() and torch.signbit(tail_out[finite]).all()
    assert torch.isnan(tail_out[~finite]).all()  # as F.gelu(-inf)
