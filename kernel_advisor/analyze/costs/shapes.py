"""Output-shape arithmetic the trace does not record: broadcasting, reductions, windows."""
from __future__ import annotations

import math
from typing import Sequence

import torch

Shape = tuple[int, ...]


class Unmodelled(Exception):
    """The one internal signal of this package: these arguments are outside what a formula
    models. Raised by formulas and argument readers; op_cost turns it into None (unknown, not zero)."""


def numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def broadcast(*shapes: Sequence[int]) -> Shape:
    """torch.broadcast_shapes; Unmodelled when the shapes are incompatible."""
    try:
        return tuple(torch.broadcast_shapes(*shapes))
    except (RuntimeError, ValueError):  # incompatible sizes; negative sizes
        raise Unmodelled(f"shapes {shapes} do not broadcast") from None


def wrap_dim(dim: int, ndim: int) -> int:
    rank = max(ndim, 1)  # a 0-dim tensor accepts dim 0 and -1
    if not -rank <= dim < rank:
        raise Unmodelled(f"dim {dim} out of range for {ndim} dims")
    return dim % rank


def reduced(shape: Shape, dims: Sequence[int] | None, keepdim: bool) -> Shape:
    """Shape after reducing `dims` (None or empty: every dim, as torch does)."""
    if not dims:
        axes = set(range(len(shape)))
    else:
        axes = {wrap_dim(d, len(shape)) for d in dims}
    if keepdim:
        return tuple(1 if i in axes else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def expand_param(values: Sequence[int], spatial: int, name: str) -> tuple[int, ...]:
    """A per-spatial-dim parameter given as one value for all dims or one per dim."""
    if len(values) == 1:
        return tuple(values) * spatial
    if len(values) != spatial:
        raise Unmodelled(f"{name} {list(values)} does not match {spatial} spatial dims")
    return tuple(values)


def conv_out_size(size: int, kernel: int, stride: int, pad: int, dilation: int) -> int:
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def conv_transpose_out_size(size: int, kernel: int, stride: int, pad: int, dilation: int,
                            output_pad: int) -> int:
    return (size - 1) * stride - 2 * pad + dilation * (kernel - 1) + output_pad + 1


def pool_out_size(size: int, kernel: int, stride: int, pad: int, dilation: int,
                  ceil_mode: bool) -> int:
    """ATen's pooling_output_shape, including its ceil_mode rule for the last window."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    out = (span + (stride - 1 if ceil_mode else 0)) // stride + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out
