"""The one correctness gate's driver, for `try-kernel` and `recommend --measure` alike.

A step's output leaves and parameter gradients are captured (`capture_step`); fresh input
draws with eager's and the reference's captures are made once and shared (`GateDraws`); each
variant's capture on a draw is held against them (`gate_draw`) into its `GateRecord`.
"""
from __future__ import annotations

import dataclasses
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
import torch.nn as nn

from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.runner import make_step
from kernel_advisor.collect.user_code import tensor_leaves
from kernel_advisor.errors import exception_text
from kernel_advisor.trykernel.gate import (LeafComparison, check_call_output, compare_leaf, finite_problem,
                                           uninitialized_memory_poisoned)
from reference_kernels.registry import EAGER_ROUTE

MAX_REASON_CHARS = 300


@dataclass(frozen=True)
class Captured:
    leaves: tuple[tuple[str, torch.Tensor], ...]  # (path, tensor): outputs, then gradients
    # A reference run on a sample of the batch (trykernel/reference.py): the items its
    # leaves hold along dim 0, and the batch size they were taken from. None: every item.
    batch_index: tuple[int, ...] | None = None
    batch_size: int = 0


def capture_step(loaded: LoadedModel, model: Any, params_of: Any, inputs: list, mode: str) -> Captured:
    """One step of `model` on `inputs`; gradients are read from `params_of`'s parameters.

    Everything is cloned at once: CUDA-graph variants overwrite their outputs on the next run.
    """
    step = make_step(dataclasses.replace(loaded, model=model, inputs=inputs), mode, optimizer=False)
    out = step()
    leaves = [(path, t.detach().clone()) for path, t in tensor_leaves(out)]
    if mode == "train" and isinstance(params_of, nn.Module):
        leaves += [(f"grad[{name}]", p.grad.detach().clone())
                   for name, p in params_of.named_parameters() if p.grad is not None]
    return Captured(tuple(leaves))


def compare_captures(got: Captured, base: Captured, ref: Captured | None, tolerance) -> list[LeafComparison]:
    """Every baseline leaf against the variant's leaf of the same path (and the reference's)."""
    got_by, ref_by = dict(got.leaves), dict(ref.leaves) if ref is not None else {}
    if ref is not None and ref.batch_index is not None:
        return [_compare_sampled(path, got_by.get(path), b, ref_by.get(path), ref, tolerance(b.dtype))
                for path, b in base.leaves]
    return [compare_leaf(path, got_by.get(path), b, ref_by.get(path), tolerance(b.dtype))
            for path, b in base.leaves]


def _compare_sampled(path: str, got: torch.Tensor | None, base: torch.Tensor, ref_leaf: torch.Tensor | None,
                     ref: Captured, tolerance) -> LeafComparison:
    """Variant and eager sliced to the reference's batch items; the other items still must not
    turn NaN or constant where eager is not. A leaf without a batch dim has no sampled
    reference (a scalar loss, a gradient): it is held against eager only."""
    n = len(ref.batch_index)
    batched = base.ndim >= 1 and base.shape[0] == ref.batch_size
    if (got is None or ref_leaf is None or not batched or got.shape != base.shape
            or tuple(ref_leaf.shape) != (n, *base.shape[1:])):
        return compare_leaf(path, got, base, None, tolerance)
    rows = torch.tensor(ref.batch_index)
    c = compare_leaf(path, got.index_select(0, rows.to(got.device)), base.index_select(0, rows.to(base.device)),
                     ref_leaf, tolerance)
    problem = c.problem or finite_problem(got, base)
    return dataclasses.replace(c, ok=not problem, problem=problem)


@dataclass
class GateRecord:
    """What the gate saw for one variant over every draw."""

    comparisons: list[LeafComparison] = field(default_factory=list)
    error: str = ""  # the variant raised: its first line
    draws: int = 0
    tolerance: str = ""  # a tolerance other than the variant's or the default, and why ("" for none)
    logs: dict[str, CallLog] = field(default_factory=dict)  # per substituted kernel: its calls
    compile_s: float | None = None  # a compiled variant's first (compiling) call

    @property
    def problem(self) -> str:
        bad = next((c for c in self.comparisons if not c.ok), None)
        return self.error or (f"{bad.path}: {bad.problem}" if bad else "")

    def worst(self) -> dict | None:
        """The largest errors seen, for people: relative to eager and to the reference."""
        if not self.comparisons:
            return None
        worst = {"draws": self.draws, "leaves": len(self.comparisons) // max(self.draws, 1),
                 "rel_err": _max(c.rel_err for c in self.comparisons),
                 "ref_rel_err": _max(c.ref_rel_err for c in self.comparisons),
                 "baseline_ref_rel_err": _max(c.baseline_ref_rel_err for c in self.comparisons)}
        return {**worst, "tolerance": self.tolerance} if self.tolerance else worst


class GateDraws:
    """The gate's fresh input draws, with eager's and the reference's captures on each: made once,
    on first use, and shared by every variant gated after."""

    def __init__(self, loaded: LoadedModel, mode: str, reference, count: int, seed: int) -> None:
        self.loaded, self.mode, self.reference, self.count, self.seed = loaded, mode, reference, count, seed
        self._made: list[tuple] = []

    def __getitem__(self, d: int) -> tuple:
        while len(self._made) <= d:
            loaded, mode = self.loaded, self.mode
            inputs = loaded.make_inputs(self.seed + 1 + len(self._made))
            base = capture_step(loaded, loaded.model, loaded.model, inputs, mode)
            self._made.append((inputs, base, self.reference.capture(loaded, inputs, mode)))
        return self._made[d]


Tolerance = Callable[[torch.dtype], tuple[float, float]]


def gate_draw(record: GateRecord, run: Callable[[], tuple[Captured, Tolerance]], base: Captured,
              ref: Captured | None, failure: Callable[[Exception], str] = None) -> None:
    """One draw of one variant: `run` makes its capture and says the tolerance it is held to.

    A variant that raises is recorded with `failure(e)` (default: the exception's first line) and
    not gated again; `failure` may re-raise where the error is not the variant's to own.
    """
    if record.error:
        return
    try:
        got, tolerance = run()
    except Exception as e:  # noqa: BLE001 - a variant the model rejects is a result, not a crash
        record.error = (failure or first_line)(e)
        return
    record.comparisons.extend(compare_captures(got, base, ref, tolerance))
    record.draws += 1


def first_line(e: BaseException) -> str:
    return exception_text(e)[:MAX_REASON_CHARS]


def _max(values) -> float | None:
    finite = [v for v in values if v == v]
    return max(finite) if finite else None


# ------------------------------------------------------------
# Counting and checking every call a substitution routes to a candidate kernel.
#
# Both substitution layers (aten overrides and module swaps) go through `invoke`, so the
# proof that a candidate ran, the per-call correctness check and the re-entrancy guard are
# written once.

MAX_FAILURES_KEPT = 5


class CandidateError(RuntimeError):
    """The candidate raised, or returned something the model cannot use (shape, dtype)."""


@dataclass
class CallLog:
    """Mutable tally for one candidate during one variant run (not a record: it counts)."""

    label: str
    candidate_calls: int = 0
    fallback_reasons: Counter = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    error: str | None = None

    @property
    def fallback_calls(self) -> int:
        return sum(self.fallback_reasons.values())

    def fallback(self, reason: str) -> None:
        self.fallback_reasons[reason] += 1

    @property
    def eager_routes(self) -> Counter:
        """The fallbacks the registry chose: shape classes the kernel loses (or cannot take)."""
        return Counter({r: n for r, n in self.fallback_reasons.items() if r.startswith(EAGER_ROUTE)})

    def fail(self, reason: str) -> None:
        if len(self.failures) < MAX_FAILURES_KEPT:
            self.failures.append(reason)

    def merge(self, other: "CallLog") -> None:
        self.candidate_calls += other.candidate_calls
        self.fallback_reasons.update(other.fallback_reasons)
        for f in other.failures:
            self.fail(f)
        self.error = self.error or other.error


_state = threading.local()


def reentrant() -> bool:
    """True inside a candidate or a check: ops it calls must reach the original kernels.

    Without this a candidate written with torch ops (`torch.softmax(x.float(), -1)`) would
    recurse into its own override forever.
    """
    return getattr(_state, "depth", 0) > 0


@contextmanager
def _inside() -> Iterator[None]:
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


def invoke(log: CallLog, candidate: Callable[[], Any], original: Callable[[], Any],
           check: bool, tolerance: tuple[float, float]) -> Any:
    """Run the candidate for one call; in check mode compare it with the original first."""
    log.candidate_calls += 1
    where = f"call {log.candidate_calls} of {log.label}"
    with _inside():
        if not check:
            return _call(log, where, candidate)
        with torch.no_grad():
            expected = original()
        with uninitialized_memory_poisoned():
            got = _call(log, where, candidate)
        problem, fatal = check_call_output(got, expected, tolerance)
    if problem:
        log.fail(f"{where}: {problem}")
        if fatal:  # the model cannot go on with a wrongly shaped or typed tensor
            raise CandidateError(f"{where}: {problem}")
    return got


def _call(log: CallLog, where: str, candidate: Callable[[], Any]) -> Any:
    try:
        return candidate()
    except CandidateError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of the candidate is its verdict
        log.error = log.error or f"{where} raised {type(e).__name__}: {e}"
        raise CandidateError(log.error) from e
