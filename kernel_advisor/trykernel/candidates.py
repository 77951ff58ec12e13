"""What can be tried: registry kernels and a user's --impl, and how each is installed.

A Candidate carries the callable and every place it goes in this model: aten overrides
(one per overload it replaces) and module swaps (one per detected pattern match).
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch

from kernel_advisor.collect.loader import import_model_file
from kernel_advisor.errors import EnvironmentCapabilityError, UserInputError
from kernel_advisor.trykernel.adapters import ATEN_FAMILIES, ATEN_PATTERNS, REFERENCE_OPS, Route
from kernel_advisor.trykernel.capture import CallLog
from kernel_advisor.trykernel.patterns import PATTERN_NAMES, PatternMatch
from kernel_advisor.trykernel.substitute_aten import (AtenAdapter, override_aten, reference_adapter, resolve_op,
                                                      user_adapter)
from kernel_advisor.trykernel.substitute_module import ModuleSwap, marker_name, swap_modules
from reference_kernels.registry import DEFAULT_TOLERANCES, KernelSpec
from reference_kernels.routes import routes as measured_routes

Tolerance = Callable[[torch.dtype], tuple[float, float]]


@dataclass(frozen=True, eq=False)
class Candidate:
    id: str
    title: str
    origin: str  # "reference" or "user"
    backend: str  # "triton", "cuda" or "python"
    fn: Callable | None  # None only when `invalid` says why it cannot be called
    aten: tuple[AtenAdapter, ...]
    patterns: tuple[PatternMatch, ...]
    dtypes: tuple[str, ...]
    has_backward: bool
    tolerance: Tolerance
    invalid: str = ""  # set: FAILED before running (e.g. a signature that cannot take the op's arguments)
    undetectable: tuple[str, ...] = ()  # registry patterns try-kernel has no detector for
    route: Route | None = None  # KernelSpec.eager_route: the shape classes left to eager

    @property
    def profile_names(self) -> tuple[str, ...]:
        names = [n for a in self.aten for n in a.profile_names]
        names += [marker_name(m.pattern) for m in self.patterns]
        return tuple(dict.fromkeys(names))

    @property
    def targets(self) -> tuple[str, ...]:
        """What it replaces, for people: 'aten::_softmax', 'rmsnorm-module ×5'."""
        counts: dict[str, int] = {}
        for m in self.patterns:
            counts[m.pattern] = counts.get(m.pattern, 0) + 1
        return tuple([a.name for a in self.aten] + [f"{p} ×{n}" for p, n in counts.items()]
                     + [f"{p} (no detector)" for p in self.undetectable])


def spec_tolerance(spec: KernelSpec) -> Tolerance:
    return lambda dtype: spec.tolerance(dtype)


def default_tolerance(dtype: torch.dtype) -> tuple[float, float]:
    name = str(dtype).replace("torch.", "")
    return DEFAULT_TOLERANCES.get(name, DEFAULT_TOLERANCES["float32"])


def aten_names(spec: KernelSpec) -> tuple[str, ...]:
    """The aten ops a spec replaces, including patterns that are one composite op."""
    return tuple(spec.replaces_aten) + tuple(ATEN_PATTERNS[p] for p in spec.replaces_patterns if p in ATEN_PATTERNS)


def aten_families(spec: KernelSpec) -> tuple[str, ...]:
    """The profiler names a spec's aten ops stand for (softmax covers aten::softmax too)."""
    names = []
    for a in aten_names(spec):
        family = ATEN_FAMILIES.get(a)
        names += REFERENCE_OPS[family].profile_names if family else [a]
    return tuple(dict.fromkeys(names))


def applies(spec: KernelSpec, op_names: set[str], patterns: set[str]) -> bool:
    return bool(set(aten_families(spec)) & op_names or set(spec.replaces_patterns) & patterns)


def from_spec(spec: KernelSpec, matches: Sequence[PatternMatch], host_bound: bool = True,
              dispatch_host_s: float = 0.0) -> Candidate:
    """A registry kernel with its adapters and this model's matches of its patterns; its measured
    routes are those of a host-bound step unless `host_bound` is False (reference_kernels/routes.py),
    each call of the kernel paying `dispatch_host_s` of substitution there."""
    route = functools.partial(spec.eager_route, host_bound=host_bound, dispatch_host_s=dispatch_host_s)
    adapters = []
    for name in aten_names(spec):
        adapter = reference_adapter(name, spec.dtypes, spec.has_backward, route)
        if adapter is None:
            raise UserInputError(f"kernel {spec.id} replaces {name}, which try-kernel has no adapter for",
                                 f"supported ops: {', '.join(sorted(ATEN_FAMILIES))}")
        adapters.append(adapter)
    try:
        fn = spec.load()
    except ImportError as e:
        raise EnvironmentCapabilityError(f"kernel {spec.id} cannot be loaded: {e}",
                                         "install what it needs (see `advisor kernels`)") from e
    own = tuple(m for m in matches if m.pattern in spec.replaces_patterns)
    unknown = tuple(p for p in spec.replaces_patterns if p not in PATTERN_NAMES and p not in ATEN_PATTERNS)
    measured_routes()  # read now: the compile + kernel variant routes calls inside traced code
    return Candidate(id=spec.id, title=spec.title, origin="reference", backend=spec.capability.backend, fn=fn,
                     aten=tuple(dict((a.name, a) for a in adapters).values()), patterns=own,
                     dtypes=spec.dtypes, has_backward=spec.has_backward, tolerance=spec_tolerance(spec),
                     undetectable=unknown, route=route)


def from_impl(impl: str, op_text: str) -> Candidate:
    """`--impl FILE.py:FUNCTION --op ATEN_OP`: the user's callable with the op's signature."""
    path_text, sep, func_name = impl.rpartition(":")
    if not sep or not path_text or not func_name:
        raise UserInputError(f"--impl '{impl}' is not FILE.py:FUNCTION", "e.g. --impl my_kernels.py:softmax")
    path = Path(path_text)
    if not path.is_file():
        raise UserInputError(f"--impl file {path} does not exist", "check the path before ':'")
    module = import_model_file(path.resolve())
    fn = getattr(module, func_name, None)
    if fn is None or not callable(fn):
        raise UserInputError(f"{path.name} has no function '{func_name}'",
                             f"define `def {func_name}(...)` with the arguments of {op_text}")
    op = resolve_op(op_text)
    adapter = user_adapter(op)
    all_dtypes = ("float32", "float16", "bfloat16", "float64")
    return Candidate(id=f"{path.name}:{func_name}", title=f"user kernel for {adapter.name}", origin="user",
                     backend="python", fn=fn, aten=(adapter,), patterns=(), dtypes=all_dtypes,
                     has_backward=True, tolerance=default_tolerance, invalid=signature_problem(fn, op))


def signature_problem(fn: Callable, op: torch._ops.OpOverload) -> str:
    """Why `fn` cannot be called with the op's arguments ("" when it can)."""
    schema = op._schema
    positional = [a.name for a in schema.arguments if not a.kwarg_only]
    keyword = [a.name for a in schema.arguments if a.kwarg_only]
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return ""  # a builtin or extension: nothing to check before calling it
    try:
        sig.bind(*positional, **{k: k for k in keyword})
    except TypeError as e:
        return (f"signature {getattr(fn, '__name__', 'the function')}{sig} cannot take the {len(schema.arguments)} arguments of "
                f"{schema} ({e})")
    return ""


def combine(cands: Sequence[Candidate]) -> tuple[list[Candidate], list[str]]:
    """Candidates that can run together; a later one that replaces the same op or module is left out."""
    taken: set = set()
    kept, notes = [], []
    for c in cands:
        keys = {a.name for a in c.aten} | {(id(m.module), m.pattern, getattr(m, "norm_node", "")) for m in c.patterns}
        clash = keys & taken
        if clash or c.invalid:
            notes.append(f"{c.id} left out of the combined run: "
                         + ("it cannot be called" if c.invalid else "it replaces what an earlier kernel replaces"))
            continue
        taken |= keys
        kept.append(c)
    return kept, notes


@contextmanager
def installed(cands: Sequence[Candidate], logs: dict[str, CallLog], device_type: str, check: bool,
              marker: bool = False) -> Iterator[None]:
    """Every candidate's overrides and swaps, torn down on exit (exceptions included)."""
    with ExitStack() as stack:
        for c in cands:
            for adapter in c.aten:
                stack.enter_context(override_aten(adapter, c.fn, device_type, logs[c.id], check, c.tolerance))
        swaps = [ModuleSwap(m, c.fn, logs[c.id], c.dtypes, c.has_backward, c.tolerance, marker, route=c.route)
                 for c in cands for m in c.patterns]
        stack.enter_context(swap_modules(swaps, check))
        yield


@contextmanager
def baseline_markers(cands: Sequence[Candidate]) -> Iterator[None]:
    """The original computation of every matched pattern inside its profiler range."""
    seen, swaps = set(), []
    for c in cands:
        for m in c.patterns:
            key = (id(m.module), m.pattern, getattr(m, "norm_node", ""))
            if key not in seen:
                seen.add(key)
                swaps.append(ModuleSwap(m, None, CallLog("baseline"), c.dtypes, True, c.tolerance, marker=True))
    with swap_modules(swaps, check=False):
        yield


# ------------------------------------------------------------
# What one try-kernel invocation compares: options, candidate sets and their gate state.

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


@dataclass(frozen=True)
class TryOptions:
    mode: str = "inference"
    draws: int = 3  # fresh input draws through the correctness gate
    reps: int = 30  # timed rounds (every variant once per round)
    warmup: int = 3  # untimed steps per variant before the rounds
    profile_steps: int = 3  # steps under torch.profiler for per-op device time
    compile: bool = True
    compile_mode: str = "default"
    check_only: bool = False
    seed: int = 0


@dataclass(frozen=True)
class TryRequest:
    """One try-kernel invocation: which kernels, how, on which run; `record_args` is what
    try_kernel.json's "args" says of it."""

    kernel_ids: tuple[str, ...] = ()
    together: bool = False  # also every applicable kernel installed at once
    impl: str | None = None  # a user's kernel, "file.py:function"
    op: str | None = None  # the aten op `impl` replaces
    run: Path | None = None  # the run the results are saved into (None: the model's latest)
    options: TryOptions = TryOptions()
    record_args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, eq=False)
class CandidateSet:
    """One candidate, or several installed together ("all together")."""

    name: str
    members: tuple[Candidate, ...]
    combined: bool = False

    @property
    def kind(self) -> str:
        return "combined" if self.combined else "candidate"

    @property
    def kernel_ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.members)

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(t for c in self.members for t in c.targets)

    @property
    def profile_names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(n for c in self.members for n in c.profile_names))

    @property
    def interpreted_on_cpu(self) -> bool:
        """Triton kernels run through the interpreter on CPU: correct, but not timeable."""
        return any(c.backend == "triton" for c in self.members)

    def tolerance(self, dtype: torch.dtype) -> tuple[float, float]:
        tols = [c.tolerance(dtype) for c in self.members]
        return max(t[0] for t in tols), max(t[1] for t in tols)


def new_logs(s: CandidateSet) -> dict[str, CallLog]:
    return {c.id: CallLog(" + ".join(a.name for a in c.aten) or c.id) for c in s.members}


def activation(s: CandidateSet | None, device_type: str, marker: bool = False):
    """A zero-argument context factory installing `s` (nothing for eager and compile)."""
    if s is None:
        return contextlib.nullcontext
    return functools.partial(installed, s.members, new_logs(s), device_type, False, marker)


def compile_name(options: TryOptions) -> str:
    return "torch.compile" + ("" if options.compile_mode == "default" else f" ({options.compile_mode})")
