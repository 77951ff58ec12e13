"""Verification inputs per kernel family, shared by Triton and CUDA kernels (verify.py).

Backend-neutral (imports torch only): a family is the op a kernel stands in for, named by the
kernel id after its backend prefix ("cuda.rms_norm" -> "rms_norm"). Each family makes the
positional args of the launcher's PyTorch-mirroring signature from a shape, a dtype and a
variant, on the CPU from a seeded generator; the harness moves them to the device.
Shapes: "cpu" lists are small and odd so the Triton interpreter finishes quickly; "cuda" lists
add 1823x781 and rows longer than one block at sizes models use (128K vocabularies).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import torch

Shape = tuple[int, ...]


@dataclass(frozen=True)
class Call:
    args: tuple
    kwargs: Mapping[str, object]
    grad_positions: tuple[int, ...]  # which args are differentiable inputs


@dataclass(frozen=True)
class Family:
    make: Callable[[Shape, torch.dtype, str, torch.Generator], Call]
    variants: tuple[str, ...]
    shapes: Mapping[str, tuple[Shape, ...]]  # "cpu" / "cuda"
    gradcheck_shape: Shape
    # Variants gradcheck can judge (default: all); finite differences at -inf inputs are NaN.
    gradcheck_variants: tuple[str, ...] = ()


def family_name(kernel_id: str) -> str:
    return kernel_id.split(".", 1)[-1]


def _randn(shape: Shape, dtype, gen, scale: float = 1.0, shift: float = 0.0) -> torch.Tensor:
    # Drawn in float64 and rounded once, so every dtype sees the same values.
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale + shift).to(dtype)


def _softmax(shape, dtype, variant, gen) -> Call:
    x = _randn(shape, dtype, gen, scale=2.0)
    if variant == "masked":  # attention-style -inf entries; column 0 stays finite
        drop = torch.rand(shape, generator=gen) < 0.2
        drop[..., 0] = False
        x = x.masked_fill(drop, float("-inf"))
    return Call((x,), {"dim": -1}, (0,))


def _layer_norm(shape, dtype, variant, gen) -> Call:
    n = shape[-1]
    x = _randn(shape, dtype, gen, scale=2.0, shift=0.5)  # a mean offset tests the variance
    w, b = (_randn((n,), dtype, gen, 0.5, 1.0), _randn((n,), dtype, gen, 0.1)) \
        if variant == "affine" else (None, None)
    return Call((x, (n,), w, b, 1e-5), {}, (0, 2, 3) if w is not None else (0,))


def _rms_norm(shape, dtype, variant, gen) -> Call:
    n = shape[-1]
    x = _randn(shape, dtype, gen, scale=2.0, shift=0.5)
    w = _randn((n,), dtype, gen, 0.5, 1.0) if variant == "weight" else None
    return Call((x, (n,), w, 1e-6), {}, (0, 2) if w is not None else (0,))


def _with_residual(norm_case):
    """The fused residual variant of a norm case: (x, residual, *norm args), grads of both."""
    def case(shape, dtype, variant, gen) -> Call:
        inner = norm_case(shape, dtype, variant, gen)
        residual = _randn(shape, dtype, gen)
        x, *rest = inner.args
        grads = (0, 1) + tuple(p + 1 for p in inner.grad_positions if p)
        return Call((x, residual, *rest), {}, grads)
    return case


_add_layer_norm = _with_residual(_layer_norm)
_add_rms_norm = _with_residual(_rms_norm)


def _gelu(shape, dtype, variant, gen) -> Call:
    return Call((_randn(shape, dtype, gen, scale=3.0),), {"approximate": variant}, (0,))


def _silu(shape, dtype, variant, gen) -> Call:
    return Call((_randn(shape, dtype, gen, scale=3.0),), {}, (0,))


def _swiglu(shape, dtype, variant, gen) -> Call:
    return Call((_randn(shape, dtype, gen, scale=3.0), _randn(shape, dtype, gen, scale=2.0)),
                {}, (0, 1))


def _cross_entropy(shape, dtype, variant, gen) -> Call:
    rows, vocab = shape
    logits = _randn(shape, dtype, gen, scale=3.0)
    target = torch.randint(0, vocab, (rows,), generator=gen)
    target[1::4] = -100  # every 4th row ignored; row 0 never, so the mean is defined
    return Call((logits, target), {"ignore_index": -100, "reduction": variant}, (0,))


def _matmul(shape, dtype, variant, gen) -> Call:
    m, k, n = shape
    a = _randn((m, k), dtype, gen)
    # "nt": b is a transposed (N, K) weight, as F.linear hands it to aten::mm.
    b = _randn((n, k), dtype, gen).t() if variant == "nt" else _randn((k, n), dtype, gen)
    return Call((a, b), {}, ())


_ROWS_CPU: tuple[Shape, ...] = ((1, 1), (1, 7), (7, 127), (5, 781))
_ROWS_CUDA: tuple[Shape, ...] = ((1, 1), (1, 7), (7, 127), (127, 127), (1823, 781), (64, 8191))
_FLAT_CPU: tuple[Shape, ...] = ((1,), (7,), (127,), (7, 127), (3, 5, 781), (40009,))
_FLAT_CUDA: tuple[Shape, ...] = _FLAT_CPU + ((1823, 781), (4, 1000003))
_GRADCHECK_ROWS: Shape = (2, 5)  # the full Jacobian costs 2 launches per input element

# Longer than one block: softmax loops above 32768 columns, cross-entropy above 8192.
_SOFTMAX_SHAPES = {"cpu": _ROWS_CPU + ((3, 40009),), "cuda": _ROWS_CUDA + ((16, 100003),)}
# Norms keep a whole row in registers up to 65536 (8x65521 sits near that limit); longer rows
# are split over programs (4x100003 on the GPU; 16x100003 softmax takes the few-rows split).
# No 1-wide rows: they normalise to +-1 and their input gradient is pure cancellation
# (~1e-7 absolute error on a ~1e-7 value in any float32 implementation, torch's included).
_NORM_SHAPES = {"cpu": _ROWS_CPU[1:] + ((2, 9001),),
                "cuda": _ROWS_CUDA[1:] + ((8, 65521), (4, 100003))}
_FLAT_SHAPES = {"cpu": _FLAT_CPU, "cuda": _FLAT_CUDA}
_CE_SHAPES = {"cpu": _ROWS_CPU + ((3, 20011),), "cuda": _ROWS_CUDA + ((64, 128256), (7, 200003))}
_MATMUL_SHAPES = {  # (M, K, N)
    "cpu": ((1, 1, 1), (7, 7, 7), (127, 33, 65), (67, 781, 45)),
    "cuda": ((1, 1, 1), (7, 7, 7), (127, 127, 127), (1823, 781, 1023), (2048, 4096, 1536)),
}

FAMILIES: dict[str, Family] = {
    "softmax": Family(_softmax, ("plain", "masked"), _SOFTMAX_SHAPES, _GRADCHECK_ROWS,
                      ("plain",)),
    "log_softmax": Family(_softmax, ("plain", "masked"), _SOFTMAX_SHAPES, _GRADCHECK_ROWS,
                          ("plain",)),
    "layer_norm": Family(_layer_norm, ("affine", "plain"), _NORM_SHAPES, _GRADCHECK_ROWS),
    "rms_norm": Family(_rms_norm, ("weight", "plain"), _NORM_SHAPES, _GRADCHECK_ROWS),
    "add_layer_norm": Family(_add_layer_norm, ("affine", "plain"), _NORM_SHAPES, _GRADCHECK_ROWS),
    "add_rms_norm": Family(_add_rms_norm, ("weight", "plain"), _NORM_SHAPES, _GRADCHECK_ROWS),
    "gelu": Family(_gelu, ("none", "tanh"), _FLAT_SHAPES, _GRADCHECK_ROWS),
    "silu": Family(_silu, ("",), _FLAT_SHAPES, _GRADCHECK_ROWS),
    "swiglu": Family(_swiglu, ("",), _FLAT_SHAPES, _GRADCHECK_ROWS),
    # "none" checks per-row upstream gradients; "sum" differs from "mean" by a scalar only.
    "cross_entropy": Family(_cross_entropy, ("mean", "none"), _CE_SHAPES, (3, 5)),
    "matmul": Family(_matmul, ("nn", "nt"), _MATMUL_SHAPES, (3, 5, 7)),
}
