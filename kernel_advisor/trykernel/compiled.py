"""torch.compile with a kernel substituted ("torch.compile + <kernel>"): does it still pay?

The model is compiled with the candidate set installed the way Dynamo can trace: module
swaps in traced mode (substitute_module.py) and a TorchFunctionMode for the aten-level
kernels (substitute_function.py), both built once so that the compiled code's guards hold
from one step to the next. Only the bundled kernels take part: they are torch.library
operators (the Triton kernels' advisor_kernels, reference_kernels/triton/_ops.py; the CUDA
kernels' advisor_cuda, reference_kernels/cuda/library.cpp), so the compiled graph can hold
them. An --impl function is opaque Python to Dynamo.

`torch._dynamo.explain` reports the graphs, the graph breaks and their reasons, and the
proof that the kernel runs compiled: its operator among the graphs' nodes
(counting calls at run time would be a side effect inside the compiled code). explain resets
Dynamo's caches, so every explain runs before anything is compiled.
"""
from __future__ import annotations

import contextlib
import itertools
import types
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Iterator, Sequence

import torch

from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.trykernel.capture import CallLog
from kernel_advisor.trykernel.candidates import Candidate, CandidateSet, TryOptions, compile_name
from kernel_advisor.trykernel.capture import GateRecord
from kernel_advisor.trykernel.substitute_function import KernelFunctionMode, covers, routes_for
from kernel_advisor.trykernel.substitute_module import ModuleSwap, build_forwards, patched_forwards

KIND = "compile+kernel"
# The operator namespace of each bundled backend (reference_kernels/triton/_ops.py's NAMESPACE,
# reference_kernels/cuda/_dispatch.py's NAMESPACE).
OP_NAMESPACES = {"triton": "advisor_kernels", "cuda": "advisor_cuda"}
# CUDA kernels that share an operator (reference_kernels/cuda/library.cpp); the rest are
# named as their kernel. NB: a set holding both kernels of one operator (cuda.gelu and
# cuda.silu) counts that operator's sites for each.
CUDA_OPERATORS = {"log_softmax": "softmax", "gelu": "act", "silu": "act",
                  "bias_gelu": "bias_act", "bias_silu": "bias_act"}
MAX_REASON_CHARS = 300


@dataclass(frozen=True)
class GraphSummary:
    """What Dynamo made of one forward: graphs, breaks, and the kernels' call sites."""

    graphs: int
    breaks: int
    break_reasons: tuple[str, ...]
    op_sites: tuple[tuple[str, int], ...]  # ("advisor_kernels::rms_norm", call sites), sorted

    def sites(self, op_name: str) -> int:
        return dict(self.op_sites).get(op_name, 0)


@dataclass(eq=False)
class KernelCompiled:
    """One "torch.compile + <set>" variant: its compiled model, installation and gate."""

    name: str
    set: CandidateSet
    model: object  # torch.compile(model): compiled on its first call, inside activate()
    activate: Callable[[], ContextManager]
    state: GateRecord = field(default_factory=lambda: GateRecord())
    graphs: GraphSummary | None = None
    graph_error: str = ""

    def member_sites(self) -> tuple[tuple[str, int], ...]:
        if self.graphs is None:
            return tuple((c.id, 0) for c in self.set.members)
        return tuple((c.id, self.graphs.sites(op_name(c.id))) for c in self.set.members)


class _OwnFrame(torch.nn.Module):
    def __init__(self, inner) -> None:
        super().__init__()
        self.inner = inner


_FRAMES = itertools.count()


def compile_in_own_frame(model, mode: str = "default"):
    """torch.compile(model, mode), entered through a forward whose code object is its own.

    Dynamo keeps compiled code on the code object of the forward it starts from. Compiling one
    model several ways (modes, layouts, kernels) puts every variant's entry on the same
    `Model.forward`, and each call of any of them then checks the others' guards first: tens of
    microseconds a call, which a host-bound step pays in full (a small conv net measured its
    CUDA-graph variant 1.5× instead of 2.4× that way). A fresh code object per variant keeps
    one cache entry per frame, as the user's own script, compiling once, would have.
    """
    n = next(_FRAMES)

    def forward(self, *args, **kwargs):
        return self.inner(*args, **kwargs)

    code = forward.__code__.replace(co_name=f"advisor_variant_{n}")
    fn = types.FunctionType(code, forward.__globals__, "forward", None, forward.__closure__)
    wrapper = type(f"AdvisorVariant{n}", (_OwnFrame,), {"forward": fn})(model)
    if isinstance(model, torch.nn.Module):
        wrapper.train(model.training)
    return torch.compile(wrapper, mode=mode)


def op_name(kernel_id: str) -> str:
    """The operator a bundled kernel calls: triton.rms_norm -> advisor_kernels::rms_norm,
    cuda.gelu -> advisor_cuda::act."""
    backend, name = kernel_id.split(".", 1)
    if backend == "cuda":
        name = CUDA_OPERATORS.get(name, name)
    return f"{OP_NAMESPACES[backend]}::{name}"


def compile_problem(c: Candidate) -> str:
    """Why `c` gets no compiled variant ("" when it does)."""
    if c.origin != "reference" or c.backend not in OP_NAMESPACES:
        return (f"{c.id} is not a bundled kernel: only those get a compiled variant "
                "(try-kernel counts their operators in the compiled graphs)")
    uncovered = [a.name for a in c.aten if not covers(a.name)]
    if uncovered:
        return f"{c.id}: no function-level substitution for {', '.join(uncovered)}"
    return ""


def installer(cands: Sequence[Candidate]) -> Callable[[], ContextManager]:
    """A zero-argument context factory installing `cands` as Dynamo traces them; the swapped
    forwards and the function mode are built here, once, and reused by every activation."""
    swaps = [ModuleSwap(m, c.fn, CallLog(c.id), c.dtypes, c.has_backward, c.tolerance, traced=True, route=c.route)
             for c in cands for m in c.patterns]
    forwards = build_forwards(swaps, check=False)
    routes = [r for c in cands for a in c.aten for r in routes_for(a.name, a.prepare, c.fn, c.has_backward)]
    mode = KernelFunctionMode(routes) if routes else None

    @contextmanager
    def activate() -> Iterator[None]:
        with patched_forwards(forwards), (mode if mode is not None else contextlib.nullcontext()):
            yield

    return activate


def plan(loaded: LoadedModel, sets: Sequence[CandidateSet], options: TryOptions
         ) -> tuple[list[KernelCompiled], list[str]]:
    """A compiled variant per set of bundled kernels; notes for the sets left out."""
    out, notes = [], []
    for s in sets:
        problems = [p for p in (compile_problem(c) for c in s.members) if p]
        if problems:
            notes.append(f"{compile_name(options)} + {s.name} left out: {problems[0]}")
            continue
        out.append(KernelCompiled(f"{compile_name(options)} + {s.name}", s,
                                  compile_in_own_frame(loaded.model, options.compile_mode),
                                  installer(s.members)))
    return out, notes


def explain_graphs(loaded: LoadedModel, inputs: list, mode: str,
                   activate: Callable[[], ContextManager] = contextlib.nullcontext) -> GraphSummary:
    """Dynamo's view of one forward of the model on `inputs` with `activate()` installed.

    Resets Dynamo's caches (torch._dynamo.explain does, before and after).
    """
    model = loaded.model
    if isinstance(model, torch.nn.Module):
        model.train(mode == "train")
    grad = torch.no_grad() if mode == "inference" else contextlib.nullcontext()
    autocast = (torch.autocast(loaded.device.type, dtype=loaded.autocast) if loaded.autocast is not None
                else contextlib.nullcontext())
    with activate(), grad, autocast:
        explained = torch._dynamo.explain(model)(*inputs)
    sites: dict[str, int] = {}
    for gm in explained.graphs:
        for node in gm.graph.nodes:
            target = node.target
            if node.op == "call_function" and isinstance(target, torch._ops.OpOverload) \
                    and target.namespace in OP_NAMESPACES.values():
                sites[target.name()] = sites.get(target.name(), 0) + 1
    reasons = tuple(_first_line(str(r.reason)) for r in explained.break_reasons)
    return GraphSummary(graphs=explained.graph_count, breaks=explained.graph_break_count,
                        break_reasons=reasons, op_sites=tuple(sorted(sites.items())))


def explain_all(loaded: LoadedModel, variants: Sequence[KernelCompiled], mode: str
                ) -> tuple[GraphSummary | None, str]:
    """The plain model's graphs, then every variant's (set on it); (plain summary, its error)."""
    plain, plain_error = _explain_or_reason(loaded, mode, contextlib.nullcontext)
    for v in variants:
        v.graphs, v.graph_error = _explain_or_reason(loaded, mode, v.activate)
    return plain, plain_error


def _explain_or_reason(loaded: LoadedModel, mode: str, activate) -> tuple[GraphSummary | None, str]:
    try:
        return explain_graphs(loaded, list(loaded.inputs), mode, activate), ""
    except Exception as e:  # noqa: BLE001 - a model Dynamo cannot trace is a result, not a crash
        return None, f"torch._dynamo.explain failed: {_first_line(f'{type(e).__name__}: {e}')}"


def not_applied_reason(v: KernelCompiled) -> str:
    """"" when every member has a call site in the compiled graphs, else why not."""
    if v.graphs is None:
        return v.graph_error or "no graphs"
    idle = [k for k, n in v.member_sites() if n == 0]
    if not idle:
        return ""
    return (f"the compiled graphs hold no call of {', '.join(idle)}: Dynamo kept PyTorch's op "
            "(every call was one the kernel does not take, or the call is not at the level of "
            "torch.nn.functional)")


@contextmanager
def recompile_room(n_variants: int) -> Iterator[None]:
    """Room in Dynamo's per-code cache for every compiled variant at once.

    The plain compiled model and each "compile + kernel" variant compile the same forward
    under different guards (the function mode, the swapped forwards); interleaved timing
    alternates between them, so each needs its own cache entry. Past the limit (8 by default)
    Dynamo would silently run the forward eagerly.
    """
    config = torch._dynamo.config
    key = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    need = max(getattr(config, key), 2 * (n_variants + 2))
    with config.patch(**{key: need}):
        yield


def _first_line(text: str) -> str:
    text = text.strip()
    return text.splitlines()[0][:MAX_REASON_CHARS] if text else ""
