"""How the Python wrappers reach the advisor_cuda operators (library.cpp).

Eager calls go through the extension's `op_*` functions: one pybind call into the dispatcher,
whose Autograd kernel records the C++ autograd Function only when an input requires grad, so a
call costs about what an aten op costs and its backward runs no Python. Dispatch modes and
profilers see these calls as the operators they are. Only Dynamo cannot step into a pybind
function: while it traces, the wrappers call `torch.ops.advisor_cuda.<op>` instead, which it
puts into the graph whole (output shapes from the operators' Meta kernels).
"""
from __future__ import annotations

from types import ModuleType

import torch

from reference_kernels.cuda.build import load_extension

NAMESPACE = "advisor_cuda"


def extension() -> ModuleType:
    """The built extension (cached per process; the first call builds or loads it)."""
    return load_extension()


@torch.compiler.assume_constant_result
def _operators_loaded() -> bool:
    # Dynamo runs this once at trace time instead of tracing the build.
    load_extension()
    return True


def compiling() -> bool:
    return torch.compiler.is_compiling()


def operator(name: str):
    """torch.ops.advisor_cuda.<name>, for Dynamo's trace (loads the extension first)."""
    _operators_loaded()
    return getattr(getattr(torch.ops, NAMESPACE), name)
