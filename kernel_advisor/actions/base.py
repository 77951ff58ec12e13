"""What an action is: a named, reversible transformation of a model and its inputs.

An action is prepared once against a loaded model (`prepare`), which either returns a
Variant or raises NotApplicable with the reason. A Variant is what the measurement runs:
the model to call, the inputs to call it with, and a context entered around every step
(flags, module swaps, autocast). Nothing it changes outlives `Variant.close()`; between
steps the user's model is exactly as written, so eager and every variant can be timed
interleaved in one process.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, ContextManager, Sequence

import torch

from kernel_advisor.collect.loader import LoadedModel

Tolerance = Callable[[torch.dtype], "tuple[float, float]"]
# Rungs of the ladder, cheapest first: the order actions are stacked in a plan.
STAGES = ("library", "compile", "kernel")


class NotApplicable(Exception):
    """The action has nothing to change in this model (the message says why)."""


class NotMeasurable(Exception):
    """The action applies, but this machine cannot time it (the message says why)."""


@dataclass
class Variant:
    """A prepared action. `context()` is entered around every step it runs."""

    action: str
    model: Any
    applied: str  # what changed, for people: "4 attention sites", "cudnn.benchmark on"
    params_of: Any = None  # whose parameters hold the gradients, when not the user's model (a copy)
    context: Callable[[], ContextManager] = contextlib.nullcontext
    convert_inputs: Callable[[list], list] = lambda inputs: inputs  # e.g. to channels_last, once per draw
    tolerance: Tolerance | None = None  # looser than the kernel default when numerics change on purpose
    counters: Callable[[], "tuple[int, int]"] | None = None  # (calls routed, calls that fell back)
    closers: list[Callable[[], None]] = field(default_factory=list)
    stage: str = "library"

    def close(self) -> None:
        for close in reversed(self.closers):
            close()
        self.closers.clear()


@dataclass(frozen=True)
class Action:
    """A registry entry: its name, rung, what it conflicts with, and how it is prepared.

    `prepare(loaded, mode)` sees the model as earlier actions of a plan left it (their
    contexts are entered while it runs) and raises NotApplicable / NotMeasurable.
    """

    name: str
    title: str
    stage: str  # one of STAGES
    prepare: Callable[[LoadedModel, str], Variant]  # (loaded model, mode) -> Variant
    exclusive: str = ""  # actions sharing a non-empty group are never stacked in one plan
    excludes: tuple[str, ...] = ()  # groups this action cannot be stacked with
    # Other actions whose subjects this one fixes as well: its predicted gain is the union of theirs
    # and its own (compile:reduce-overhead does all that compile does, and inductor pads GEMMs).
    also_fixes: tuple[str, ...] = ()
    # Within a rung, 0 for a global flag that changes no code: on a tied estimate it ranks first.
    effort: int = 1
    # Modes of the same rung (compile's CUDA-graph mode) measured beside it on CUDA: a recommendation
    # naming this action is credited with whichever measured clearly faster (recommend/measured.py).
    refinements: tuple[str, ...] = ()
    # Preparing it takes much longer than a step (max-autotune benchmarks every GEMM shape): it is
    # gated and timed after the others, so under a --budget-s it gives way instead of starving them.
    slow_to_prepare: bool = False
    # Measured on the ranks of a distributed run (actions/data_parallel.py), never in one process.
    distributed: bool = False


def stacked(variants: Sequence[Variant]) -> Variant:
    """Several prepared variants as one: contexts nested in order; the last model wins.

    Library actions change the model in place (swaps, flags, layout), so a later stage
    (compile) prepared after them wraps the already-changed model.
    """
    def context() -> ContextManager:
        stack = contextlib.ExitStack()
        for v in variants:
            stack.enter_context(v.context())
        return stack

    tolerances = [v.tolerance for v in variants if v.tolerance is not None]

    def tolerance(dtype: torch.dtype) -> tuple[float, float]:
        tols = [t(dtype) for t in tolerances]
        return max(t[0] for t in tols), max(t[1] for t in tols)

    def convert(inputs: list) -> list:
        for v in variants:
            inputs = v.convert_inputs(inputs)
        return inputs

    last = variants[-1]
    owner = next((v.params_of for v in reversed(variants) if v.params_of is not None), None)
    return Variant(action=" + ".join(v.action for v in variants), model=last.model, params_of=owner,
                   applied="; ".join(v.applied for v in variants), context=context, convert_inputs=convert,
                   tolerance=tolerance if tolerances else None, stage=last.stage)


@contextlib.contextmanager
def instance_forwards(patches: Sequence["tuple[torch.nn.Module, Callable]"]):
    """Instance-level `forward` overrides, removed on exit.

    The same function objects are installed on every entry, so a torch.compile of the
    model traced under them keeps its guards valid from one step to the next.
    """
    saved = [(m, m.__dict__.get("forward", _MISSING)) for m, _ in patches]
    try:
        for module, forward in patches:
            module.__dict__["forward"] = forward  # an instance attribute shadows the class's forward
        yield
    finally:
        for module, previous in reversed(saved):
            if previous is _MISSING:
                module.__dict__.pop("forward", None)
            else:
                module.__dict__["forward"] = previous


_MISSING = object()
