"""One-dimensional FFTs: fft_fft, fft_ifft (complex), fft_rfft (real to complex), fft_irfft.

FLOPs: 5*n*log2(n) per complex transform of length n (the radix-2 count), half that for a real
one; the input read once and the output written once. A real input of fft_fft counts as the
complex transform it becomes. NB: lengths that are not powers of two cost more (Bluestein).
"""
from __future__ import annotations

import math

from kernel_advisor.analyze.costs import dtypes as dt
from kernel_advisor.analyze.costs.call import OpCall
from kernel_advisor.analyze.costs.common import io_cost, written
from kernel_advisor.analyze.costs.registry import OpCost, register
from kernel_advisor.analyze.costs.shapes import Unmodelled, wrap_dim

COMPLEX_OF = {"float16": "complex32", "bfloat16": "complex64", "float32": "complex64", "float64": "complex128"}
REAL_OF = {v: k for k, v in COMPLEX_OF.items() if k != "bfloat16"}


def _complex(dtype: str) -> str:
    return dtype if dtype.startswith("complex") else COMPLEX_OF.get(dtype, "complex64")


@register("fft_fft", "fft_ifft", "fft_rfft", "fft_irfft")
def fft_1d(call: OpCall) -> OpCost:
    # fft_*(self, n, dim=-1, norm): n pads or trims the transformed dim
    x = call.tensor(0)
    if not x.shape:
        raise Unmodelled(f"{call.name}: 0-dim input")
    dim = wrap_dim(call.int_at(2, -1), len(x.shape))
    kind = call.name.removeprefix("aten::fft_")
    default_n = 2 * (x.shape[dim] - 1) if kind == "irfft" else x.shape[dim]
    n = call.int_at(1, None) or default_n
    rows = x.numel // max(x.shape[dim], 1)
    per_transform = 5 * n * math.log2(n) if n > 1 else 0
    if kind in ("rfft", "irfft"):
        per_transform /= 2
    out_len = n // 2 + 1 if kind == "rfft" else n
    out_dtype = REAL_OF.get(x.dtype, "float32") if kind == "irfft" else _complex(x.dtype)
    if not dt.is_dtype_name(out_dtype):
        raise Unmodelled(f"{call.name}: no dtype for the output of {x.dtype}")
    out = written(x.shape[:dim] + (out_len,) + x.shape[dim + 1:], out_dtype)
    return io_cost(rows * per_transform, [x], [out], REAL_OF.get(x.dtype, x.dtype))  # the FMA pipe's dtype
