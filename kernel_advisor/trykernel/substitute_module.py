"""Module-level swaps for composed patterns, restored on exit.

A swap sets an instance attribute `forward` on the matched module (it shadows the class
method; hooks, parameters and the state dict are untouched) and deletes it afterwards.
A residual+norm match rewrites its parent's forward: the parent is traced one level deep
with FX, the `add` and the norm call become one fused call, and the rewritten graph shares
every child module and parameter with the original.

With `fn=None` a swap runs the original computation; with `marker=True` the replaced part
runs inside a `try_kernel::<pattern>` profiler range, so the baseline's and the candidate's
device time for exactly that part can be read from torch.profiler.

With `traced=True` (the compiled variants, which Dynamo traces) a swap only decides whether
the kernel takes the call and calls it: no counting, no check, no re-entrancy guard, no
profiler range, since each would be a Python side effect inside the compiled code.
"""
from __future__ import annotations

import contextlib
import operator
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import record_function

from kernel_advisor.trykernel.adapters import Route, needs_grad, row_shape_of, unsupported_input
from kernel_advisor.trykernel.capture import CallLog, invoke, reentrant
from kernel_advisor.trykernel.patterns import (PatternMatch, ResidualNormMatch, RMSNormMatch, SwiGLUMatch,
                                               trace_one_level)

Tolerance = Callable[[torch.dtype], tuple[float, float]]


@dataclass(frozen=True)
class ModuleSwap:
    match: PatternMatch
    fn: Callable | None  # the candidate; None runs the original computation
    log: CallLog
    dtypes: tuple[str, ...]
    has_backward: bool
    tolerance: Tolerance
    marker: bool = False
    traced: bool = False  # called from code torch.compile traces: support check and call only
    route: Route | None = None  # KernelSpec.eager_route: the shape classes left to eager

    def unsupported(self, x: torch.Tensor, *others: torch.Tensor | None) -> str:
        """Why this norm call stays with PyTorch: an input the kernel does not take, or a
        (rows, last dim) the registry says it loses on."""
        reason = unsupported_input(x, self.dtypes, self.has_backward, True, *others)
        if reason or self.route is None:
            return reason
        return self.route(*row_shape_of(x, x.shape[-1]), needs_grad(x, *others), x.device.type)


def marker_name(pattern: str) -> str:
    return f"try_kernel::{pattern}"


@contextmanager
def swap_modules(swaps: Sequence[ModuleSwap], check: bool) -> Iterator[None]:
    with patched_forwards(build_forwards(swaps, check)):
        yield


Forwards = list[tuple[nn.Module, Callable]]


def build_forwards(swaps: Sequence[ModuleSwap], check: bool) -> Forwards:
    """(module, forward) for every swap, in the order they are patched in (a later forward of
    the same module wraps the earlier one). Built once, they can be patched in many times:
    torch.compile guards on the forward functions, so the compiled variants reuse them."""
    saved: list[tuple[nn.Module, Any]] = []
    built: Forwards = []
    try:
        # patched as they are built: a residual rewrite traces its parent's forward as it is then
        for swap in swaps:
            if not isinstance(swap.match, ResidualNormMatch):
                forward = _forward_for(swap, swap.match.module.forward, check)
                _patch(saved, swap.match.module, forward)
                built.append((swap.match.module, forward))
        by_parent: dict[int, list[ModuleSwap]] = defaultdict(list)
        for swap in swaps:
            if isinstance(swap.match, ResidualNormMatch):
                by_parent[id(swap.match.module)].append(swap)
        for group in by_parent.values():
            gm = _rewrite_residuals(group, check)
            if gm is not None:
                _patch(saved, group[0].match.module, gm.forward)
                built.append((group[0].match.module, gm.forward))
        return built
    finally:
        _restore(saved)


@contextmanager
def patched_forwards(forwards: Forwards) -> Iterator[None]:
    """The modules' forwards replaced while inside, restored on exit (exceptions included)."""
    saved: list[tuple[nn.Module, Any]] = []
    try:
        for module, forward in forwards:
            _patch(saved, module, forward)
        yield
    finally:
        _restore(saved)


def _restore(saved: list[tuple[nn.Module, Any]]) -> None:
    for module, previous in reversed(saved):
        if previous is _MISSING:
            module.__dict__.pop("forward", None)
        else:
            module.__dict__["forward"] = previous


_MISSING = object()


def _patch(saved: list, module: nn.Module, forward: Callable) -> None:
    saved.append((module, module.__dict__.get("forward", _MISSING)))
    module.__dict__["forward"] = forward  # an instance attribute shadows the class's forward


def _marker(swap: ModuleSwap):
    return record_function(marker_name(swap.match.pattern)) if swap.marker else contextlib.nullcontext()


def _forward_for(swap: ModuleSwap, original: Callable, check: bool) -> Callable:
    if isinstance(swap.match, RMSNormMatch):
        return _rmsnorm_forward(swap, original, check)
    if isinstance(swap.match, SwiGLUMatch):
        return _swiglu_forward(swap, original, check)
    raise TypeError(f"no module swap for {type(swap.match).__name__}")


def _rmsnorm_forward(swap: ModuleSwap, original: Callable, check: bool) -> Callable:
    match = swap.match

    def traced_forward(x, *args, **kwargs):
        if args or kwargs or swap.unsupported(x, match.weight):
            return original(x, *args, **kwargs)
        eps = torch.finfo(x.dtype).eps if match.eps is None else match.eps
        return swap.fn(x, [x.shape[-1]], match.weight, eps)

    def forward(x, *args, **kwargs):
        if args or kwargs or reentrant():
            return original(x, *args, **kwargs)
        with _marker(swap):
            if swap.fn is None:
                return original(x)
            reason = swap.unsupported(x, match.weight)
            if reason:
                swap.log.fallback(reason)
                return original(x)
            eps = torch.finfo(x.dtype).eps if match.eps is None else match.eps
            return invoke(swap.log, lambda: swap.fn(x, [x.shape[-1]], match.weight, eps),
                          lambda: original(x), check, swap.tolerance(x.dtype))

    return traced_forward if swap.traced else forward


def _swiglu_forward(swap: ModuleSwap, original: Callable, check: bool) -> Callable:
    match = swap.match

    def traced_forward(x, *args, **kwargs):
        if args or kwargs:
            return original(x, *args, **kwargs)
        a, b = match.gate(x), match.up(x)
        return match.down(F.silu(a) * b if _swiglu_unsupported(swap, a, b) else swap.fn(a, b))

    def forward(x, *args, **kwargs):
        if args or kwargs or reentrant():
            return original(x, *args, **kwargs)
        a, b = match.gate(x), match.up(x)
        with _marker(swap):
            h = _swiglu_hidden(swap, a, b, check)
        return match.down(h)

    return traced_forward if swap.traced else forward


def _swiglu_unsupported(swap: ModuleSwap, a: torch.Tensor, b: torch.Tensor) -> str:
    reason = unsupported_input(a, swap.dtypes, swap.has_backward, True, b)
    if not reason and a.shape != b.shape:
        reason = "gate and up projections differ in shape"
    return reason


def _swiglu_hidden(swap: ModuleSwap, a: torch.Tensor, b: torch.Tensor, check: bool) -> torch.Tensor:
    if swap.fn is None:
        return F.silu(a) * b
    reason = _swiglu_unsupported(swap, a, b)
    if reason:
        swap.log.fallback(reason)
        return F.silu(a) * b
    return invoke(swap.log, lambda: swap.fn(a, b), lambda: F.silu(a) * b, check, swap.tolerance(a.dtype))


class _ResidualNorm(nn.Module):
    """(x, residual) -> (norm(x + residual), x + residual), through the candidate if it can."""

    def __init__(self, swap: ModuleSwap, check: bool) -> None:
        super().__init__()
        object.__setattr__(self, "swap", swap)  # not a child: the user's norm stays theirs
        self.check = check

    def forward(self, x, residual):
        swap, norm = self.swap, self.swap.match.norm

        def original():
            summed = x + residual
            return norm(summed), summed

        if swap.traced:
            return original() if self._unsupported(x, residual) else swap.fn(*self._args(x, residual))
        with _marker(swap):
            if swap.fn is None or reentrant():
                return original()
            reason = self._unsupported(x, residual)
            if reason:
                swap.log.fallback(reason)
                return original()
            return invoke(swap.log, lambda: swap.fn(*self._args(x, residual)), original, self.check,
                          swap.tolerance(x.dtype))

    def _unsupported(self, x, residual) -> str:
        match = self.swap.match
        reason = self.swap.unsupported(x, residual, match.weight, match.bias)
        if not reason and (not isinstance(residual, torch.Tensor) or x.shape != residual.shape):
            reason = "the two summands differ in shape (broadcasting add)"
        return reason

    def _args(self, x, residual) -> tuple:
        match = self.swap.match
        eps = torch.finfo(x.dtype).eps if match.eps is None else match.eps
        if match.pattern == "residual-layernorm":
            return x, residual, [x.shape[-1]], match.weight, match.bias, eps
        return x, residual, [x.shape[-1]], match.weight, eps


def _rewrite_residuals(group: Sequence[ModuleSwap], check: bool) -> fx.GraphModule | None:
    """The parent's forward with each (add, norm) pair replaced by one fused call."""
    parent = group[0].match.module
    graph = trace_one_level(parent)
    if graph is None:
        return None
    nodes = {n.name: n for n in graph.nodes}
    fused_modules: dict[str, nn.Module] = {}
    for i, swap in enumerate(group):
        add, norm = nodes.get(swap.match.add_node), nodes.get(swap.match.norm_node)
        if add is None or norm is None:
            continue
        target = f"_advisor_residual_norm_{i}"
        fused_modules[target] = _ResidualNorm(swap, check)
        with graph.inserting_after(add):  # where the sum was: every user of it comes later
            fused = graph.call_module(target, tuple(add.args))
        with graph.inserting_after(fused):
            normed = graph.call_function(operator.getitem, (fused, 0))
        with graph.inserting_after(normed):
            summed = graph.call_function(operator.getitem, (fused, 1))
        norm.replace_all_uses_with(normed)
        graph.erase_node(norm)
        add.replace_all_uses_with(summed)
        graph.erase_node(add)
    graph.lint()
    return fx.GraphModule(_graph_root(parent, graph, fused_modules), graph, class_name=type(parent).__name__)


def _graph_root(parent: nn.Module, graph: fx.Graph, extra: dict[str, nn.Module]) -> dict[str, Any]:
    root: dict[str, Any] = dict(extra)
    for node in graph.nodes:
        if node.op in ("call_module", "get_attr") and node.target not in root:
            root[node.target] = operator.attrgetter(node.target)(parent)
    return root
