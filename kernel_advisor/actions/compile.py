"""`compile`, `compile:reduce-overhead`, `compile:max-autotune-no-cudagraphs`: torch.compile the model."""
from __future__ import annotations

import contextlib
from typing import Iterator

import torch

from kernel_advisor.actions.base import Action, NotApplicable, Variant
from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.trykernel.compiled import compile_in_own_frame

MODES = {"compile": "default", "compile:reduce-overhead": "reduce-overhead",
         "compile:max-autotune-no-cudagraphs": "max-autotune-no-cudagraphs"}


def _preparer(name: str):
    mode = MODES[name]

    def prepare(loaded: LoadedModel, run_mode: str) -> Variant:
        if mode == "reduce-overhead" and loaded.device.type != "cuda":
            raise NotApplicable("CUDA graphs (mode='reduce-overhead') need a CUDA device; this run is on the CPU")
        if isinstance(loaded.model, torch._dynamo.eval_frame.OptimizedModule):
            raise NotApplicable("the model is already compiled")
        compiled = compile_in_own_frame(loaded.model, mode)
        # params_of: the compiled wrapper names its parameters `_orig_mod.*`; gradients are compared by name.
        variant = Variant(name, compiled, f"torch.compile(model, mode={mode!r})", params_of=loaded.model,
                          stage="compile", context=_quiet_autotune if "autotune" in mode else contextlib.nullcontext)
        # Each variant compiles afresh; the cache must not hand one mode's code to another.
        variant.closers.append(torch._dynamo.reset)
        return variant

    return prepare


@contextlib.contextmanager
def _quiet_autotune() -> Iterator[None]:
    """Inductor writes each GEMM's autotuning table straight to stderr; the advisor's stderr
    carries only its own lines, and the compile happens inside the first timed step's context."""
    from torch._inductor import select_algorithm

    saved = select_algorithm.PRINT_AUTOTUNE
    select_algorithm.PRINT_AUTOTUNE = False
    try:
        yield
    finally:
        select_algorithm.PRINT_AUTOTUNE = saved


# NB: inductor pads misaligned matmul dimensions itself (torch._inductor.config.shape_padding, on
# by default), so a compiled model gets what pad_gemm would give.
_ALSO_FIXES = {"compile": ("pad_gemm",), "compile:reduce-overhead": ("compile", "pad_gemm"),
               "compile:max-autotune-no-cudagraphs": ("compile", "pad_gemm")}

# The default mode's recommendations are also measured with CUDA graphs: once compile has fused
# the step, what is left is often launch overhead, which the run's eager trace cannot show.
_REFINEMENTS = {"compile": ("compile:reduce-overhead",)}

ACTIONS = tuple(Action(name, f"torch.compile (mode {mode!r})", "compile", _preparer(name), exclusive="compile",
                       also_fixes=_ALSO_FIXES[name], refinements=_REFINEMENTS.get(name, ()),
                       slow_to_prepare="autotune" in mode)
                for name, mode in MODES.items())
