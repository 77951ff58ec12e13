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

Eager calls skip the operator. A torch.library call costs ~100 µs of host time in Python
(schema parsing, the aliasing checks, the autograd wrapper; measured on an H200 host, torch
2.11), against ~10 µs for an eager aten op, and a short kernel is then paid for by launch
cost alone. So `kernel_op` returns a `KernelOp`: while Dynamo, AOTAutograd or any dispatch
mode traces it, or torch.profiler records, it calls the operator; otherwise it runs the
launcher directly, through a plain autograd.Function (the same setup_context and backward)
only when a gradient is needed.
"""
from __future__ import annotations

import functools
import os
from typing import Callable

import torch
from torch.library import CustomOpDef

from reference_kernels.triton._common import INTERPRETED
from reference_kernels.triton._launch import fast

NAMESPACE = "advisor_kernels"

# NB: triton_op needs launches it can trace: compiled @triton.jit functions, not the interpreter's.
USE_TRITON_OP = (not INTERPRETED and hasattr(torch.library, "triton_op")
                 and os.environ.get("ADVISOR_TRITON_OP", "1") != "0")


class KernelOp:
    """One advisor_kernels operator and its eager fast path (see the module docstring).

    Call it like the function it wraps; `register_autograd(backward, setup_context=...)` as
    torch.library's. `op` is the torch.library CustomOpDef.
    """

    def __init__(self, fn: Callable, op: CustomOpDef):
        self.fn, self.op = fn, op
        self._function: type[torch.autograd.Function] | None = None
        functools.update_wrapper(self, fn)

    def register_autograd(self, backward: Callable, *, setup_context: Callable) -> None:
        self.op.register_autograd(backward, setup_context=setup_context)
        self._function = _autograd_function(self.fn, backward, setup_context)

    def __call__(self, *args):
        # Under torch.profiler too: the trace then holds the operator as an op of its own, which
        # the kernels' device time is attributed to (advisor profile, try-kernel's per-op time).
        # Host time is not what a profile measures; the flag is a plain attribute read.
        if traced() or torch.autograd.profiler._is_profiler_enabled:
            return self.op(*args)
        if self._function is not None and torch.is_grad_enabled() and _requires_grad(args):
            return self._function.apply(*args)
        return self.fn(*args)


def traced() -> bool:
    """True while torch.compile, AOTAutograd, a dispatch mode or a functorch transform sees the
    call: the operator must appear, not the kernels' launches."""
    # NB: Dynamo folds is_compiling() to True and never evaluates the rest, which it cannot trace.
    return (torch.compiler.is_compiling() or torch._C._len_torch_dispatch_stack() > 0
            or torch._C._are_functorch_transforms_active())


def _requires_grad(args: tuple) -> bool:
    return any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)


def _autograd_function(fn: Callable, backward: Callable, setup_context: Callable
                       ) -> type[torch.autograd.Function]:
    """An autograd.Function running `fn` forward, with register_autograd's own callbacks."""
    # NB: forward takes ctx and calls setup_context itself. A Function with a separate
    # setup_context binds its default arguments through inspect.signature on every call
    # (~40 us of host time per call, torch 2.11), which this form skips.
    def forward(ctx, *args):
        output = fn(*args)
        setup_context(ctx, args, output)
        return output

    return type(f"{fn.__name__}_function", (torch.autograd.Function,), {
        "forward": staticmethod(forward),
        "backward": staticmethod(backward),
    })


def kernel_op(name: str, fake: Callable) -> Callable[[Callable], KernelOp]:
    """Decorator: registers `fn` as advisor_kernels::<name> with the fake implementation
    `fake` (same signature; output shapes, dtypes and strides only), and returns the KernelOp
    that calls it (the operator when traced, `fn` in eager).

    `fn` must not mutate its inputs or return them (or views of them): it allocates its
    outputs. The explicit fake also serves triton_op, whose default fake would run the whole
    launcher (configs, grids) on fake tensors.
    """
    def register(fn: Callable) -> KernelOp:
        qualname = f"{NAMESPACE}::{name}"
        define = torch.library.triton_op if USE_TRITON_OP else torch.library.custom_op
        op = define(qualname, fn, mutates_args=())
        op.register_fake(fake)
        return KernelOp(fn, op)

    return register


def launcher(kernel):
    """`kernel` itself, or `wrap_triton(kernel)` while a dispatch mode traces the launch.

    AOTAutograd decomposes a triton_op under FunctionalTensorMode (and make_fx under its proxy
    mode): there the launch must be the traceable wrapper. Everywhere else the kernel
    launches directly, through its cached compiled kernel (_launch.py); through the wrapper an
    eager launch would pay the higher-order op's dispatch (~1 ms of host time, torch's own
    figure).
    """
    if USE_TRITON_OP and torch._C._len_torch_dispatch_stack():
        return torch.library.wrap_triton(kernel)
    return fast(kernel)


KERNEL_MODULES = ("softmax", "norm", "gelu", "silu", "swiglu", "cross_entropy", "matmul")


def register_all() -> None:
    """Import every kernel module, so that every advisor_kernels operator exists (each module
    registers its own on import)."""
    import importlib

    for name in KERNEL_MODULES:
        importlib.import_module(f"reference_kernels.triton.{name}")
