"""Shape arithmetic on profiler records: which tensor one op hands to the next, and its size.

The profiler records input shapes and dtypes, never tensor identities or output shapes.
An op's output size is inferred from its kind (elementwise: the broadcast of its inputs;
GEMM: [..., M, N]; reduction: unknown but smaller) and matched against the next op's
inputs. A match is the evidence that the two ops are connected by an intermediate tensor.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from kernel_advisor.analyze import op_kinds
from kernel_advisor.dtypes import itemsize_bytes
from kernel_advisor.recommend.evidence import decoded

# Ops whose output has the shape of their (broadcast) tensor inputs: torch's pointwise ops
# (analyze/op_kinds.py, torch.Tag.pointwise), and these, which torch does not tag pointwise
# but which keep their input's shape and which Inductor fuses like them:
SHAPE_KEEPING = frozenset({
    "softmax", "_softmax", "_safe_softmax", "log_softmax", "_log_softmax", "_softmax_backward_data",
    "_log_softmax_backward_data",  # row-wise
    "layer_norm", "native_layer_norm", "rms_norm", "_fused_rms_norm", "group_norm", "native_group_norm",
    "batch_norm",  # normalisations (their statistics are smaller outputs beside the main one)
    "copy", "to", "_to_copy", "type_as", "contiguous",  # copies and casts
    "dropout", "native_dropout", "feature_dropout",  # random masks (Tag.nondeterministic_seeded)
    "fill", "zero", "triu", "tril",  # fills and triangle masks
    "hardswish",  # pointwise, though torch leaves it untagged
})
GEMMS = frozenset({"mm", "bmm", "matmul", "addmm", "baddbmm", "linear"})


@functools.lru_cache(maxsize=4096)
def base_name(name: str) -> str:
    """`aten::add_.Tensor` → `add`: the op family, in-place or not, any overload."""
    op = name.split("::", 1)[-1].split(".", 1)[0]
    return op[:-1] if op.endswith("_") and not op.endswith("__") else op


def is_aten(name: str) -> bool:
    return name.startswith("aten::")


@functools.lru_cache(maxsize=4096)
def is_elementwise(op: str) -> bool:
    """`op` (a base name) returns a tensor of its inputs' broadcast shape."""
    return op in SHAPE_KEEPING or op_kinds.is_pointwise(op)


@functools.lru_cache(maxsize=4096)
def is_fusible(name: str) -> bool:
    """Memory-bound ops Inductor fuses into one kernel: elementwise, reductions, norms."""
    b = base_name(name)
    return is_aten(name) and (is_elementwise(b) or op_kinds.is_reduction(b))


@dataclass(frozen=True)
class TensorArg:
    shape: tuple[int, ...]
    itemsize_bytes: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize_bytes


def tensor_args(shapes: Any, dtypes: Any) -> list[TensorArg]:
    """Tensor inputs with a known dtype; a TensorList counts as one tensor of its total size."""
    out = []
    for shape, dtype in zip(decoded(shapes), decoded(dtypes)):
        size = itemsize_bytes(dtype)
        if not isinstance(shape, list) or size is None:
            continue
        if all(isinstance(d, int) for d in shape):
            out.append(TensorArg(tuple(shape), size))
        elif shape and all(isinstance(s, list) for s in shape):
            out.append(TensorArg((sum(math.prod(s) for s in shape),), size))
    return out


def broadcast_or_none(shapes: Sequence[Sequence[int]]) -> tuple[int, ...] | None:
    """torch.broadcast_shapes; None when the shapes do not broadcast."""
    try:
        return tuple(torch.broadcast_shapes(*shapes))
    except (RuntimeError, ValueError):  # incompatible sizes; negative sizes
        return None


def _gemm_out(op: str, args: list[TensorArg]) -> tuple[int, ...] | None:
    if op == "linear" and len(args) >= 2 and len(args[1].shape) == 2:
        return args[0].shape[:-1] + (args[1].shape[0],)
    first = 1 if op in ("addmm", "baddbmm") else 0
    if len(args) < first + 2:
        return None
    a, b = args[first].shape, args[first + 1].shape
    if len(a) < 2 or len(b) < 2:
        return None
    batch = broadcast_or_none([a[:-2], b[:-2]])
    return None if batch is None else batch + (a[-2], b[-1])


def output_numel(name: str, shapes: Any, dtypes: Any) -> int | None:
    """Elements of the op's output, None when the record does not determine it."""
    op, args = base_name(name), tensor_args(shapes, dtypes)
    if not args or not is_aten(name):
        return None
    if op in GEMMS:
        out = _gemm_out(op, args)
    elif is_elementwise(op) or op.startswith("_foreach_"):  # foreach: elementwise over the list
        out = broadcast_or_none([a.shape for a in args])
    else:
        return None
    return None if out is None else math.prod(out)


def link_bytes(producer: tuple[str, Any, Any], consumer: tuple[str, Any, Any]) -> int:
    """Bytes of the tensor `producer` hands to `consumer` (0: no link is evident).

    Each argument is (name, input_shapes, input_dtypes). NB: a matching size is taken as
    the same tensor; the profiler records no tensor identities.
    """
    candidates = tensor_args(consumer[1], consumer[2])
    if not candidates:
        return 0
    if is_aten(producer[0]) and op_kinds.is_reduction(base_name(producer[0])):
        largest = max((a.numel for a in tensor_args(producer[1], producer[2])), default=0)
        # A reduction's output is smaller than, and divides, its input; scalars and masks
        # beside it are smaller still, so the largest such input is taken.
        smaller = [c for c in candidates if c.numel < largest and largest % c.numel == 0]
        return max(smaller, key=lambda c: c.numel).nbytes if smaller else 0
    if is_aten(producer[0]):
        sizes = {output_numel(*producer)} - {None}
    else:  # NB: an opaque custom op is taken to return a tensor the size of one of its inputs
        sizes = {a.numel for a in tensor_args(producer[1], producer[2])}
    same = [c for c in candidates if c.numel in sizes]
    return same[0].nbytes if same else 0
