"""Counting and checking every call a substitution routes to a candidate kernel.

Both substitution layers (aten overrides and module swaps) go through `invoke`, so the
proof that a candidate ran, the per-call correctness check and the re-entrancy guard are
written once.
"""
from __future__ import annotations

import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from kernel_advisor.trykernel.gate import check_call_output, uninitialized_memory_poisoned
from reference_kernels.registry import EAGER_ROUTE

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

