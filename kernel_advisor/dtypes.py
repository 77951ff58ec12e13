"""The one dtype table: torch dtype names, the other names a trace gives them, and their sizes.

A trace names a dtype three ways: torch.profiler's "Input type" holds C++ type names ("float",
"c10::BFloat16", "long int"), NCCL kernels and c10d ops hold c10::ScalarType names ("Float",
"BFloat16") or the ScalarType enum value of a `dtype=` argument. Every name maps to torch's
name ("float32", "bfloat16"), and every size is torch's own `torch.dtype.itemsize` (the same
as `torch.empty((), dtype=d).element_size()`): no size is written down here.

collect (attribution), analyze (costs), distributed (comms) and recommend (shapes) all read
this module; tests/test_dtypes.py profiles a tensor of every dtype and checks the names.
"""
from __future__ import annotations

import functools
from typing import Mapping

import torch

# C++ type names torch.profiler records in "Input type" (FunctionEvent.input_dtypes).
# NB: "long long int" and "long long" are what a Windows build records for int64.
PROFILER_NAMES: Mapping[str, str] = {
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

# c10::ScalarType names: an NCCL kernel's "dtype" argument, record_param_comms' "dtype".
SCALAR_TYPE_NAMES: Mapping[str, str] = {
    "Byte": "uint8", "Char": "int8", "Short": "int16", "Int": "int32", "Long": "int64",
    "Half": "float16", "Float": "float32", "Double": "float64", "ComplexHalf": "complex32",
    "ComplexFloat": "complex64", "ComplexDouble": "complex128", "Bool": "bool", "BFloat16": "bfloat16",
    "Float8_e5m2": "float8_e5m2", "Float8_e4m3fn": "float8_e4m3fn", "Float8_e5m2fnuz": "float8_e5m2fnuz",
    "Float8_e4m3fnuz": "float8_e4m3fnuz", "UInt16": "uint16", "UInt32": "uint32", "UInt64": "uint64",
    "Float8_e8m0fnu": "float8_e8m0fnu", "Float4_e2m1fn_x2": "float4_e2m1fn_x2",
}

# c10::ScalarType enum values: how the profiler records a ScalarType argument (dtype=...).
SCALAR_TYPE_CODES: Mapping[int, str] = {
    0: "uint8", 1: "int8", 2: "int16", 3: "int32", 4: "int64", 5: "float16", 6: "float32",
    7: "float64", 8: "complex32", 9: "complex64", 10: "complex128", 11: "bool", 15: "bfloat16",
    23: "float8_e5m2", 24: "float8_e4m3fn", 25: "float8_e5m2fnuz", 26: "float8_e4m3fnuz",
    27: "uint16", 28: "uint32", 29: "uint64", 44: "float8_e8m0fnu", 45: "float4_e2m1fn_x2",
}


def _torch_dtypes() -> dict[str, torch.dtype]:
    found = (getattr(torch, name) for name in dir(torch))
    return {str(d).removeprefix("torch."): d for d in found if isinstance(d, torch.dtype)}


# Every dtype this torch has, by its torch name, with torch's size of one element.
# NB: packed sub-byte dtypes (float4_e2m1fn_x2) report the size of one packed element.
ITEMSIZE_BYTES: Mapping[str, int] = {name: d.itemsize for name, d in sorted(_torch_dtypes().items())}


def dtype_name(name: str) -> str:
    """torch's name for a dtype under any of its names ("float", "Float", "torch.float32");
    a name that is none of them (a marker such as "Scalar") comes back unchanged."""
    text = name.removeprefix("torch.")
    return PROFILER_NAMES.get(text) or SCALAR_TYPE_NAMES.get(text) or text


@functools.lru_cache(maxsize=None)
def torch_dtype(name: str) -> torch.dtype | None:
    """The torch.dtype a name stands for (torch's aliases "half", "long" included), or None."""
    text = dtype_name(name) if isinstance(name, str) else ""
    candidate = getattr(torch, text, None) if text else None
    return candidate if isinstance(candidate, torch.dtype) else None


def itemsize_bytes(name: object) -> int | None:
    """Bytes per element of a dtype under any of its names; None when it names no dtype."""
    dtype = torch_dtype(name) if isinstance(name, str) else None
    return None if dtype is None else dtype.itemsize


def dtype_from_code(code: int) -> str | None:
    return SCALAR_TYPE_CODES.get(code)


def is_floating(name: object) -> bool:
    dtype = torch_dtype(name) if isinstance(name, str) else None
    return dtype is not None and dtype.is_floating_point


# torch.profiler's "Input type" names → what ops.csv holds: torch dtype names (the one dtype
# table, kernel_advisor/dtypes.py), "scalar" for a Scalar argument, "" for none.
PROFILER_TYPES = {**PROFILER_NAMES, "Scalar": "scalar", "": ""}


def profiler_dtype_name(profiler_type: str) -> str:
    return PROFILER_TYPES.get(profiler_type, profiler_type)
