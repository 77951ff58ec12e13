"""From an aten call to a candidate's call, or the reason the call stays with PyTorch.

Reference kernels mirror the PyTorch *function* (`softmax(x, dim=-1)`,
`rms_norm(x, normalized_shape, weight, eps)`), not the aten overload the dispatcher sees
(`_softmax(self, dim, half_to_float)`); an adapter translates one into the other and
decides which calls the kernel supports. A user's --impl takes the aten arguments as they
are (`aten_convention`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

# NB: reference kernels normalise over the trailing dimensions of a contiguous tensor; calls
# outside that contract fall back to PyTorch instead of failing (the Triton kernels would take
# a non-contiguous input too, through one copy: not measured against eager, so not tried).


@dataclass(frozen=True)
class Plan:
    args: tuple
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    finish: Callable[[Any], Any] = lambda result: result  # candidate result -> aten result


Prepare = Callable[[dict], "Plan | str"]  # all schema arguments by name -> plan or reason


def aten_convention(schema) -> Prepare:
    """Positional arguments positionally, keyword-only ones by name: the schema as is."""
    positional = [a.name for a in schema.arguments if not a.kwarg_only]
    keyword = [a.name for a in schema.arguments if a.kwarg_only]

    def prepare(full: dict) -> Plan:
        return Plan(args=tuple(full[n] for n in positional), kwargs={n: full[n] for n in keyword})

    return prepare


def unsupported_input(x: Any, dtypes: tuple[str, ...], has_backward: bool, composite: bool,
                      *others: torch.Tensor | None) -> str:
    """Why a reference kernel cannot take this call ("" when it can)."""
    if not isinstance(x, torch.Tensor):
        return "input is not a tensor"
    name = str(x.dtype).replace("torch.", "")
    if name not in dtypes:
        return f"dtype {name} is not supported (kernel takes {', '.join(dtypes)})"
    if x.numel() == 0:
        return "empty input"
    for t in (x, *others):
        if t is not None and not t.is_contiguous():
            return "non-contiguous input"
    for t in others:
        if t is not None and t.dtype != x.dtype:
            return f"parameter dtype {str(t.dtype).replace('torch.', '')} differs from the input's {name}"
    if composite and not has_backward and torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (x, *others)):
        return "a gradient is needed and the kernel has no backward"
    return ""


def _trailing_dims(x: torch.Tensor, normalized_shape) -> str:
    """The norms take any normalized_shape that ends x's shape (one row of their product)."""
    shape = list(normalized_shape)
    if not shape or x.dim() < len(shape) or list(x.shape[-len(shape):]) != shape:
        return f"normalized_shape {shape} is not the trailing dimensions of the input"
    return ""


# A call's shape as the kernel sees it: (rows, reduced length, dtype); None: not a row op.
RowShape = Callable[[dict], "tuple[int, int, torch.dtype] | None"]
# KernelSpec.eager_route: (rows, cols, dtype, a gradient is needed, device type) -> "" or why
Route = Callable[[int, int, torch.dtype, bool, str], str]


def row_shape_of(x: torch.Tensor, cols: int) -> tuple[int, int, torch.dtype]:
    return (x.numel() // cols if cols else 0), cols, x.dtype


def last_dim_rows(full: dict) -> tuple[int, int, torch.dtype]:
    """softmax / log_softmax over the last dim, cross-entropy over the classes; elementwise ops as
    the kernel sweep measured them (rows of the last dim)."""
    x = full["self"]
    return row_shape_of(x, x.shape[-1] if x.dim() else 1)


def norm_rows(full: dict) -> tuple[int, int, torch.dtype]:
    return row_shape_of(full["input"], math.prod(int(d) for d in full["normalized_shape"]))


def needs_grad(*tensors: torch.Tensor | None) -> bool:
    """The call records a backward: its measured pass is fwd+bwd, not fwd."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def routed(prepare: Prepare, row_shape: RowShape | None, route: Route | None) -> Prepare:
    """`prepare`, then the registry's shape classes: a call in one the kernel loses (or cannot
    take) goes to eager, its reason starting with registry.EAGER_ROUTE."""
    if row_shape is None or route is None:
        return prepare

    def prepare_routed(full: dict) -> Plan | str:
        plan = prepare(full)
        if isinstance(plan, str):
            return plan
        tensors = [v for v in full.values() if isinstance(v, torch.Tensor)]
        device = tensors[0].device.type if tensors else "cpu"
        return route(*row_shape(full), needs_grad(*tensors), device) or plan

    return prepare_routed


def softmax_prepare(dtypes: tuple[str, ...], has_backward: bool) -> Prepare:
    def prepare(full: dict) -> Plan | str:
        x, dim = full["self"], full["dim"]
        if full["half_to_float"]:
            return "half_to_float (softmax with dtype=float32 on a half input)"
        reason = unsupported_input(x, dtypes, has_backward, False)
        if reason:
            return reason
        if dim % max(x.dim(), 1) != max(x.dim(), 1) - 1:
            return f"softmax over dim {dim}, not the last"
        return Plan(args=(x,), kwargs={"dim": -1})

    return prepare


def layer_norm_prepare(dtypes: tuple[str, ...], has_backward: bool) -> Prepare:
    def prepare(full: dict) -> Plan | str:
        x, shape, weight, bias = full["input"], full["normalized_shape"], full["weight"], full["bias"]
        reason = unsupported_input(x, dtypes, has_backward, True, weight, bias) or _trailing_dims(x, shape)
        if reason:
            return reason
        return Plan(args=(x, list(shape), weight, bias, full["eps"]))

    return prepare


def rms_norm_prepare(dtypes: tuple[str, ...], has_backward: bool) -> Prepare:
    def prepare(full: dict) -> Plan | str:
        x, shape, weight, eps = full["input"], full["normalized_shape"], full["weight"], full["eps"]
        reason = unsupported_input(x, dtypes, has_backward, True, weight) or _trailing_dims(x, shape)
        if reason:
            return reason
        eps = torch.finfo(x.dtype).eps if eps is None else eps  # F.rms_norm's default
        return Plan(args=(x, list(shape), weight, eps))

    return prepare


def gelu_prepare(dtypes: tuple[str, ...], has_backward: bool) -> Prepare:
    def prepare(full: dict) -> Plan | str:
        x = full["self"]
        reason = unsupported_input(x, dtypes, has_backward, False)
        return reason or Plan(args=(x,), kwargs={"approximate": full["approximate"]})

    return prepare


def silu_prepare(dtypes: tuple[str, ...], has_backward: bool) -> Prepare:
    def prepare(full: dict) -> Plan | str:
        x = full["self"]
        return unsupported_input(x, dtypes, has_backward, False) or Plan(args=(x,))

    return prepare


def matmul_prepare(dtypes: tuple[str, ...], has_backward: bool) -> Prepare:
    """aten::mm: any strides are fine (linear passes a transposed weight)."""
    def prepare(full: dict) -> Plan | str:
        a, b = full["self"], full["mat2"]
        for t in (a, b):
            name = str(t.dtype).replace("torch.", "")
            if name not in dtypes:
                return f"dtype {name} is not supported (kernel takes {', '.join(dtypes)})"
        return "empty input" if a.numel() == 0 or b.numel() == 0 else Plan(args=(a, b))

    return prepare


CROSS_ENTROPY_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}  # at::Reduction


def cross_entropy_prepare(dtypes: tuple[str, ...], has_backward: bool) -> Prepare:
    def prepare(full: dict) -> Plan | str:
        logits, target = full["self"], full["target"]
        reason = unsupported_input(logits, dtypes, has_backward, True)
        if reason:
            return reason
        if full["weight"] is not None or full["label_smoothing"] != 0.0:
            return "class weights or label smoothing"
        if logits.dim() != 2 or target.dim() != 1 or target.is_floating_point():
            return "not (rows, classes) logits with class-index targets"
        return Plan(args=(logits, target), kwargs={"ignore_index": int(full["ignore_index"]),
                                                   "reduction": CROSS_ENTROPY_REDUCTIONS[int(full["reduction"])]})

    return prepare


@dataclass(frozen=True)
class ReferenceOp:
    """The aten overload a family of names is overridden at, and how its calls translate."""

    overload: str  # what is overridden: "aten::_softmax"
    profile_names: tuple[str, ...]  # profiler names whose device time is this op's
    prepare_factory: Callable[[tuple[str, ...], bool], Prepare]
    row_shape: RowShape | None = None  # for the registry's shape classes (KernelSpec.loses)


REFERENCE_OPS: dict[str, ReferenceOp] = {
    "softmax": ReferenceOp("aten::_softmax", ("aten::softmax", "aten::_softmax"), softmax_prepare,
                           last_dim_rows),
    "log_softmax": ReferenceOp("aten::_log_softmax", ("aten::log_softmax", "aten::_log_softmax"),
                               softmax_prepare, last_dim_rows),
    "layer_norm": ReferenceOp("aten::layer_norm", ("aten::layer_norm", "aten::native_layer_norm"),
                              layer_norm_prepare, norm_rows),
    "rms_norm": ReferenceOp("aten::rms_norm", ("aten::rms_norm", "aten::_fused_rms_norm"), rms_norm_prepare,
                            norm_rows),
    "gelu": ReferenceOp("aten::gelu", ("aten::gelu",), gelu_prepare, last_dim_rows),
    "silu": ReferenceOp("aten::silu", ("aten::silu",), silu_prepare, last_dim_rows),
    "matmul": ReferenceOp("aten::mm", ("aten::mm",), matmul_prepare),
    "cross_entropy": ReferenceOp("aten::cross_entropy_loss", ("aten::cross_entropy_loss",), cross_entropy_prepare,
                                 last_dim_rows),
}

# Names a registry entry may use in `replaces_aten` -> the family it belongs to.
# NB: the public op (softmax, layer_norm) always reaches the overridden overload, so
# overriding one place catches every spelling without double counting.
ATEN_FAMILIES: dict[str, str] = {
    "aten::_softmax": "softmax", "aten::softmax": "softmax", "aten::softmax.int": "softmax",
    "aten::layer_norm": "layer_norm", "aten::native_layer_norm": "layer_norm",
    "aten::rms_norm": "rms_norm", "aten::_fused_rms_norm": "rms_norm",
    "aten::_log_softmax": "log_softmax", "aten::log_softmax": "log_softmax",
    "aten::log_softmax.int": "log_softmax",
    "aten::gelu": "gelu", "aten::silu": "silu", "aten::mm": "matmul",
    "aten::cross_entropy_loss": "cross_entropy",
}

# Registry patterns that are one composite aten op, so they are overridden at aten level.
ATEN_PATTERNS: dict[str, str] = {"cross-entropy": "aten::cross_entropy_loss"}


def reference_op(aten_name: str) -> ReferenceOp | None:
    family = ATEN_FAMILIES.get(aten_name)
    return REFERENCE_OPS[family] if family else None
