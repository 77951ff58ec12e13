"""Dtype names as torch.profiler records them, mapped to torch dtype names, with sizes and promotion.

torch.profiler writes C++ type names ("float", "c10::BFloat16", "long int"); ops.csv may hold
those or torch names ("float32", "bfloat16"). Both are accepted everywhere in this package.
"""
from __future__ import annotations

import functools

import torch

from kernel_advisor.analyze.costs.errors import Unmodelled

SCALAR = "scalar"  # a Scalar argument (a Python number), never a tensor
NONE = ""  # None or an argument torch.profiler does not record
TENSOR_LIST = "TensorList"  # torch.profiler records no element dtype for a Tensor[] argument
# NB: formulas that must price a Tensor[] whose element dtypes were not recorded (cat, stack,
# einsum) assume torch's default dtype: bytes are 2x too high for bf16/fp16 elements and
# 2x too low for float64 ones.
ASSUMED_LIST_DTYPE = "float32"

_PROFILER_NAMES = {
    "float": "float32",
    "double": "float64",
    "c10::Half": "float16",
    "c10::BFloat16": "bfloat16",
    "unsigned char": "uint8",
    "signed char": "int8",
    "short int": "int16",
    "short": "int16",
    "int": "int32",
    "long int": "int64",
    "long long int": "int64",
    "long long": "int64",
    "short unsigned int": "uint16",
    "unsigned int": "uint32",
    "long unsigned int": "uint64",
    "bool": "bool",
    "c10::complex<c10::Half>": "complex32",
    "c10::complex<float>": "complex64",
    "c10::complex<double>": "complex128",
    "c10::Float8_e5m2": "float8_e5m2",
    "c10::Float8_e4m3fn": "float8_e4m3fn",
    "c10::Float8_e5m2fnuz": "float8_e5m2fnuz",
    "c10::Float8_e4m3fnuz": "float8_e4m3fnuz",
    "c10::Float8_e8m0fnu": "float8_e8m0fnu",
    "c10::Float4_e2m1fn_x2": "float4_e2m1fn_x2",
}

# c10::ScalarType enum values: how the profiler records a ScalarType argument (dtype=...).
_SCALAR_TYPE_CODES = {
    0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
    7: "float64", 8: "complex32", 9: "complex64", 10: "complex128", 11: "bool", 15: "bfloat16",
    23: "float8_e5m2", 24: "float8_e4m3fn", 25: "float8_e5m2fnuz", 26: "float8_e4m3fnuz",
    27: "uint16", 28: "uint32", 29: "uint64", 44: "float8_e8m0fnu", 45: "float4_e2m1fn_x2",
}

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
    return _PROFILER_NAMES.get(text, text)


@functools.lru_cache(maxsize=None)
def _torch_dtype(name: str) -> torch.dtype | None:
    candidate = getattr(torch, name, None) if name else None
    return candidate if isinstance(candidate, torch.dtype) else None


def is_dtype_name(name: object) -> bool:
    return isinstance(name, str) and _torch_dtype(name) is not None


def itemsize_bytes(name: str) -> int:
    # NB: packed sub-byte dtypes (float4_e2m1fn_x2) report the size of one packed element.
    return _torch_dtype(name).itemsize


def dtype_from_code(code: int) -> str | None:
    return _SCALAR_TYPE_CODES.get(code)


def is_floating(name: str) -> bool:
    dtype = _torch_dtype(name)
    return dtype is not None and dtype.is_floating_point


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
