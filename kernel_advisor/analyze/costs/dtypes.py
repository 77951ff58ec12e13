"""Dtypes for the cost formulas: argument markers, normalisation, sizes and type promotion.

torch.profiler writes C++ type names ("float", "c10::BFloat16", "long int"); ops.csv may hold
those or torch names ("float32", "bfloat16"). Both are accepted everywhere in this package.
The names and sizes are kernel_advisor/dtypes.py's, the one dtype table.
"""
from __future__ import annotations

import functools

import torch

from kernel_advisor import dtypes
from kernel_advisor.analyze.costs.shapes import Unmodelled

SCALAR = "scalar"  # a Scalar argument (a Python number), never a tensor
NONE = ""  # None or an argument torch.profiler does not record
TENSOR_LIST = "TensorList"  # torch.profiler records no element dtype for a Tensor[] argument
# NB: formulas that must price a Tensor[] whose element dtypes were not recorded (cat, stack,
# einsum) assume torch's default dtype: bytes are 2x too high for bf16/fp16 elements and
# 2x too low for float64 ones.
ASSUMED_LIST_DTYPE = "float32"

# Python numbers reach the dispatcher as 0-dim tensors of these dtypes ("wrapped numbers").
_WRAPPED_NUMBER_DTYPES = frozenset({"float64", "int64", "complex128", "bool"})


def normalize_dtype(name: object) -> object:
    """A torch dtype name for a tensor type; SCALAR, NONE or the original marker otherwise.

    Lists (per-element dtypes of a Tensor[] argument) are normalised element-wise.
    """
    if isinstance(name, (list, tuple)):
        return tuple(normalize_dtype(n) for n in name)
    if name is None:
        return NONE
    text = str(name).strip()
    if text.startswith("torch."):
        text = text[len("torch."):]
    if text in ("Scalar", SCALAR):
        return SCALAR
    return dtypes.PROFILER_NAMES.get(text, text)


def _torch_dtype(name: str) -> torch.dtype | None:
    return dtypes.torch_dtype(name)


def is_dtype_name(name: object) -> bool:
    return isinstance(name, str) and _torch_dtype(name) is not None


def checked_itemsize_bytes(name: str) -> int:
    """torch's size of one element; the caller has checked is_dtype_name(name)."""
    size = dtypes.itemsize_bytes(name)
    if size is None:
        raise Unmodelled(f"{name!r} is not a dtype")
    return size


dtype_from_code = dtypes.dtype_from_code
is_floating = dtypes.is_floating


def category(name: str) -> int:
    """0 bool, 1 integer, 2 floating, 3 complex: torch's type-promotion categories."""
    dtype = _torch_dtype(name)
    if dtype is torch.bool:
        return 0
    if dtype.is_complex:
        return 3
    return 2 if dtype.is_floating_point else 1


def promote(names: list[str]) -> str:
    dtypes = [_torch_dtype(n) for n in names]
    try:
        return str(functools.reduce(torch.promote_types, dtypes)).removeprefix("torch.")
    except RuntimeError:  # e.g. float8 with anything else: ATen refuses the op, so do we
        raise Unmodelled(f"torch does not promote {names}") from None


_DEFAULT_FOR_CATEGORY = {0: "bool", 1: "int64", 2: "float32", 3: "complex64"}


def result_dtype(dimensioned: list[str], zero_dim: list[str], scalar_categories: list[int]) -> str:
    """torch's result_type over tensor operands with and without dimensions and Python scalars.

    NB: the trace cannot tell a real 0-dim float64/int64 tensor from a Python number wrapped
    into one, so 0-dim tensors of those dtypes are treated as Python numbers (their category
    counts, not their width) - the common case, e.g. `x + 1e-5`.
    """
    wrapped = [category(d) for d in zero_dim if d in _WRAPPED_NUMBER_DTYPES]
    zero_dim = [d for d in zero_dim if d not in _WRAPPED_NUMBER_DTYPES]
    scalar_categories = scalar_categories + wrapped
    result = None
    for group in (dimensioned, zero_dim):
        if not group:
            continue
        group_dtype = promote(group)
        if result is None or category(group_dtype) > category(result):
            result = group_dtype
    if result is None:
        return _DEFAULT_FOR_CATEGORY[max(scalar_categories, default=2)]
    top_scalar = max(scalar_categories, default=-1)
    if top_scalar > category(result):
        result = _DEFAULT_FOR_CATEGORY[top_scalar]
    return result


def accumulate_dtype(name: str) -> str:
    """The dtype CUDA kernels accumulate statistics in (mean/rstd of norms): fp32 below fp64."""
    return "float64" if name == "float64" else "float32"
