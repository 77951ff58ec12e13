"""The branch-free normal tail that the 16-bit erf-GELU kernels use instead of erff.

log2 Phi(-a) for a = |x| in [0, CLAMP] is one degree-7 polynomial, so

    Phi(x) = e if x < 0 else 1 - e,    e = exp2(poly(min(|x|, CLAMP)))

costs 7 FMAs and one ex2 per element where libdevice's erff costs two polynomial branches,
an exp and the divergence between them: at 16384x8192 bf16 on an H200 that made the erf-GELU
instruction-bound (0.67 of copy bandwidth in Triton, 0.62 in CUDA).

The coefficients below come from `fit_log2_normal_tail()` (run this module to print them)
and are pasted as literals into reference_kernels/triton/gelu.py and
reference_kernels/cuda/device_math.h; tests/test_normal_tail.py checks that both sources carry
exactly these numbers and that the float32 evaluation stays within MAX_REL_ERROR of
0.5*erfc(a/sqrt 2).

NB: the relative error of e is ~6e-6 at worst (float32 Horner plus the fit), 40x under half an
ulp of fp16 (2.4e-4) and 300x under bf16's (2e-3), so 16-bit outputs round as they would
from the exact value except at rounding ties; float32 and float64 keep the library erf.
NB: for x < -CLAMP, |gelu(x)| = |x|*Phi(x) < 6e-9: the kernels return x * 0 (-0, NaN for -inf),
as eager's float32 erf does from about -5.5 on.
"""
from __future__ import annotations

import math

import torch

CLAMP = 6.0
DEGREE = 7
# log2 Phi(-a) ~= sum(C[k] * a**k), a in [0, CLAMP]; lowest degree first.
LOG2_PHI_TAIL = (
    -9.999952935e-01, -1.151251065e+00, -4.584643275e-01, -5.396014574e-02,
    8.507932121e-03, -9.305359658e-04, 6.159975692e-05, -1.834886221e-06,
)
MAX_REL_ERROR = 1e-5


def log2_phi_tail(a: float) -> float:
    """log2 Phi(-a) in float64, from the complementary error function (no cancellation)."""
    return math.log2(0.5 * math.erfc(a / math.sqrt(2.0)))


def fit_log2_normal_tail(clamp: float = CLAMP, degree: int = DEGREE, nodes: int = 3000,
                         iterations: int = 40) -> tuple[float, ...]:
    """Near-minimax polynomial for log2 Phi(-a) on [0, clamp]: iteratively reweighted least
    squares on Chebyshev nodes, solved in float64 in the scaled variable a/clamp."""
    k = torch.arange(nodes, dtype=torch.float64)
    a = clamp * (1 - torch.cos(math.pi * (k + 0.5) / nodes)) / 2
    basis = torch.stack([(a / clamp) ** i for i in range(degree + 1)], 1)
    target = torch.tensor([log2_phi_tail(v) for v in a.tolist()], dtype=torch.float64)
    weight = torch.ones(nodes, dtype=torch.float64)
    for _ in range(iterations):
        coeffs = torch.linalg.lstsq(basis * weight[:, None], (target * weight)[:, None]).solution[:, 0]
        err = (basis @ coeffs - target).abs()
        weight = weight * (err / err.max() + 1e-3).sqrt()  # push weight to the worst nodes
        weight = weight / weight.mean()
    return tuple(float(c) / clamp**i for i, c in enumerate(coeffs.tolist()))


def phi_tail_float32(a: torch.Tensor, coeffs: tuple[float, ...] = LOG2_PHI_TAIL) -> torch.Tensor:
    """Phi(-a) as the kernels compute it: float32 Horner, then exp2."""
    a = a.to(torch.float32).clamp(max=CLAMP)
    r = torch.full_like(a, coeffs[-1])
    for c in coeffs[-2::-1]:
        r = r * a + c
    return torch.exp2(r)


def max_rel_error(coeffs: tuple[float, ...] = LOG2_PHI_TAIL, points: int = 20001) -> float:
    """Largest |phi_tail_float32(a) / Phi(-a) - 1| over a uniform grid of [0, CLAMP]."""
    a = torch.linspace(0.0, CLAMP, points, dtype=torch.float64)
    exact = torch.tensor([0.5 * math.erfc(v / math.sqrt(2.0)) for v in a.float().double().tolist()],
                         dtype=torch.float64)
    return float((phi_tail_float32(a, coeffs).double() / exact - 1).abs().max())


def format_coeffs(coeffs: tuple[float, ...]) -> list[str]:
    """The literals as they appear in the kernel sources (10 significant digits)."""
    return [f"{c:.9e}" for c in coeffs]


if __name__ == "__main__":
    fitted = fit_log2_normal_tail()
    print("coefficients:", ", ".join(format_coeffs(fitted)))
    print(f"max relative error of Phi(-a), float32 evaluation: {max_rel_error(fitted):.2e}")
