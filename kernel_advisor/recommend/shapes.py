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

from kernel_advisor.dtypes import itemsize_bytes
from kernel_advisor.recommend.evidence import decoded

REDUCTIONS = frozenset({
    "mean", "sum", "amax", "amin", "max", "min", "var", "std", "var_mean", "std_mean", "norm",
    "logsumexp", "prod", "linalg_vector_norm", "any", "all", "argmax", "argmin"})
# Ops whose output has the broadcast shape of their tensor inputs.
ELEMENTWISE = frozenset({
    "add", "sub", "rsub", "mul", "div", "pow", "rsqrt", "sqrt", "exp", "exp2", "expm1", "log", "log1p",
    "log2", "tanh", "sigmoid", "relu", "gelu", "silu", "mish", "neg", "abs", "clamp", "clamp_min",
    "clamp_max", "where", "masked_fill", "erf", "sin", "cos", "reciprocal", "square", "maximum",
    "minimum", "hardtanh", "leaky_relu", "elu", "softplus", "hardswish", "hardsigmoid", "lerp",
    "addcmul", "addcdiv", "fill", "zero", "copy", "to", "_to_copy", "type_as", "clone", "contiguous",
    "dropout", "native_dropout", "feature_dropout", "floor", "ceil", "round", "sign", "logical_not",
    "eq", "ne", "lt", "le", "gt", "ge", "bitwise_not", "threshold", "gelu_backward",
    "threshold_backward", "silu_backward", "tanh_backward", "sigmoid_backward", "softmax",
    "_softmax", "_safe_softmax", "log_softmax", "_log_softmax", "layer_norm", "native_layer_norm",
    "rms_norm", "_fused_rms_norm", "group_norm", "native_group_norm", "batch_norm",
    "_softmax_backward_data", "_log_softmax_backward_data", "triu", "tril", "float", "half", "bfloat16",
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
def is_fusible(name: str) -> bool:
    """Memory-bound ops Inductor fuses into one kernel: elementwise, reductions, norms."""
    b = base_name(name)
    return is_aten(name) and (b in ELEMENTWISE or b in REDUCTIONS)


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


def broadcast(shapes: Sequence[Sequence[int]]) -> tuple[int, ...] | None:
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(1, ndim + 1):
        dims = {s[-i] for s in shapes if len(s) >= i} - {1}
        if len(dims) > 1:
            return None
        out.append(dims.pop() if dims else 1)
    return tuple(reversed(out))


def _gemm_out(op: str, args: list[TensorArg]) -> tuple[int, ...] | None:
    if op == "linear" and len(args) >= 2 and len(args[1].shape) == 2:
        return args[0].shape[:-1] + (args[1].shape[0],)
    first = 1 if op in ("addmm", "baddbmm") else 0
    if len(args) < first + 2:
        return None
    a, b = args[first].shape, args[first + 1].shape
    if len(a) < 2 or len(b) < 2:
        return None
    batch = broadcast([a[:-2], b[:-2]])
    return None if batch is None else batch + (a[-2], b[-1])


def output_numel(name: str, shapes: Any, dtypes: Any) -> int | None:
    """Elements of the op's output, None when the record does not determine it."""
    op, args = base_name(name), tensor_args(shapes, dtypes)
    if not args or not is_aten(name):
        return None
    if op in GEMMS:
        out = _gemm_out(op, args)
    elif op in ELEMENTWISE or op.startswith("_foreach_"):  # foreach: elementwise over the list
        out = broadcast([a.shape for a in args])
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
    if base_name(producer[0]) in REDUCTIONS and is_aten(producer[0]):
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
