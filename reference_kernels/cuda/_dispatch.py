"""How the Python wrappers reach the advisor_cuda operators (library.cpp).

Eager calls go through the extension's `fast` functions (fast.cpp): one pybind call that checks
the arguments in C++ and calls the operator through the dispatcher, whose Autograd kernel
records a backward node only when an input requires grad, so a call costs about what an aten
op costs and its backward runs no Python. A call the kernels do not take returns None there,
and the wrapper's checked path (the `op_*` functions after the Python checks of _checks.py)
names the problem and the fix; the first call of a process takes that path too, as it builds
or loads the extension. Dispatch modes and profilers see these calls as the operators they
are. Only Dynamo cannot step into a pybind function: while it traces, the wrappers call
`torch.ops.advisor_cuda.<op>` instead, which it puts into the graph whole (output shapes from
the operators' Meta kernels).
"""
from __future__ import annotations

from types import ModuleType

import torch

from reference_kernels.cuda.build import load_extension

NAMESPACE = "advisor_cuda"
FAST: ModuleType | None = None  # the extension's `fast` submodule, once extension() ran


def extension() -> ModuleType:
    """The built extension (cached per process; the first call builds or loads it)."""
    global FAST
    ext = load_extension()
    FAST = ext.fast
    return ext


def fast_call(name: str, *args):
    """fast.<name>(*args): the operator's result, or None when the call needs the checked path
    (extension not loaded yet, Dynamo tracing, or arguments the kernels do not take)."""
    if FAST is None or compiling():
        return None
    try:
        return getattr(FAST, name)(*args)
    except TypeError:  # pybind could not convert an argument (not a tensor, ...)
        return None


@torch.compiler.assume_constant_result
def _operators_loaded() -> bool:
    # Dynamo runs this once at trace time instead of tracing the build.
    load_extension()
    return True


def compiling() -> bool:
    return torch.compiler.is_compiling()


def checked_call(name: str, *args):
    """The operator after the wrapper's Python checks: torch.ops.advisor_cuda.<name> while
    Dynamo traces, else the extension's op_<name> (building or loading it first)."""
    if compiling():
        return operator(name)(*args)
    return getattr(extension(), f"op_{name}")(*args)


def operator(name: str):
    """torch.ops.advisor_cuda.<name>, for Dynamo's trace (loads the extension first)."""
    _operators_loaded()
    return getattr(getattr(torch.ops, NAMESPACE), name)
