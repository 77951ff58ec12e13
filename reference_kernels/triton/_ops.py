"""The Triton kernels as torch.library operators, so torch.compile traces calls to them.

Every public launcher (softmax, rms_norm, cross_entropy, ...) validates its arguments in
Python, then calls one operator in the `advisor_kernels` namespace
(`torch.ops.advisor_kernels.rms_norm`); kernels with a backward register it with
`register_autograd`, the backward itself being another operator. Dynamo puts the operator
into its graph (no graph break) and learns the output shapes from the operator's fake
implementation, never from running the launcher.

Compiled Triton (a GPU): `torch.library.triton_op`, so AOTAutograd decomposes the operator
into the `wrap_triton` launches inside it and Inductor calls the kernels from its generated
code. Triton's CPU interpreter (`TRITON_INTERPRET=1`): `@triton.jit` gives interpreted
functions, which `wrap_triton` cannot trace (torch 2.13 hands them back unwrapped; older
releases refuse them), so the operator is an opaque `torch.library.custom_op` there and runs
the launcher as it is, in eager and under every torch.compile backend. `ADVISOR_TRITON_OP=0`
in the environment (read at import) makes it opaque on a GPU too: Inductor then calls back
into the launcher instead of launching the kernels from its own code.
"""
from __future__ import annotations

import os
from typing import Callable

import torch
from torch.library import CustomOpDef

from reference_kernels.triton._common import INTERPRETED

NAMESPACE = "advisor_kernels"

# NB: triton_op needs launches it can trace: compiled @triton.jit functions, not the interpreter's.
USE_TRITON_OP = (not INTERPRETED and hasattr(torch.library, "triton_op")
                 and os.environ.get("ADVISOR_TRITON_OP", "1") != "0")


def kernel_op(name: str, fake: Callable) -> Callable[[Callable], CustomOpDef]:
    """Decorator: registers `fn` as advisor_kernels::<name> with the fake implementation
    `fake` (same signature; output shapes, dtypes and strides only). Returns the CustomOpDef:
    call it like `fn`, add a backward with its `register_autograd`.

    `fn` must not mutate its inputs or return them (or views of them): it allocates its
    outputs. The explicit fake also serves triton_op, whose default fake would run the whole
    launcher (configs, grids) on fake tensors.
    """
    def register(fn: Callable) -> CustomOpDef:
        qualname = f"{NAMESPACE}::{name}"
        define = torch.library.triton_op if USE_TRITON_OP else torch.library.custom_op
        op = define(qualname, fn, mutates_args=())
        op.register_fake(fake)
        return op

    return register


def launcher(kernel):
    """`kernel` itself, or `wrap_triton(kernel)` while a dispatch mode traces the launch.

    AOTAutograd decomposes a triton_op under FunctionalTensorMode (and make_fx under its proxy
    mode): there the launch must be the traceable wrapper. Everywhere else the raw kernel
    launches directly; through the wrapper an eager launch would pay the higher-order op's
    dispatch (~1 ms of host time, torch's own figure).
    """
    if USE_TRITON_OP and torch._C._len_torch_dispatch_stack():
        return torch.library.wrap_triton(kernel)
    return kernel


KERNEL_MODULES = ("softmax", "norm", "gelu", "silu", "swiglu", "cross_entropy", "matmul")


def register_all() -> None:
    """Import every kernel module, so that every advisor_kernels operator exists (each module
    registers its own on import)."""
    import importlib

    for name in KERNEL_MODULES:
        importlib.import_module(f"reference_kernels.triton.{name}")
