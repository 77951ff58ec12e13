"""The wall-clock budget of one search, and what each piece of work is expected to cost.

A compile cannot be stopped halfway, so a configuration is started only when its expected
preparation (compile included) and a short timing fit in what is left, beside a reserve for
the final timing of the best few. Costs are learnt as the search goes: the first compile of
each kind is measured, and the others expected from it.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

# NB: rough multiples of a default-mode compile, seen on an H200 across the advice models
# (max-autotune benchmarks every GEMM and, with no cudagraphs, pointwise/reduction configs).
COMPILE_COST_FACTOR = {"compile": 1.0, "compile:reduce-overhead": 1.2,
                       "compile:max-autotune-no-cudagraphs": 4.0, "float8:compile": 1.5}
# Before any compile was seen its cost is unknown: it is started when this much is left, and the
# alarm (trial.py) stops it at the end of the exploring time if it runs longer.
FIRST_COMPILE_MIN_S = 5.0
FINAL_RESERVE_FRAC = 0.15  # of the budget, kept for timing the finalists long


@dataclass
class Budget:
    """`budget_s` of wall time from now (None: no limit)."""

    budget_s: float | None
    start: float = field(default_factory=time.monotonic)
    compile_s: dict[str, float] = field(default_factory=dict)  # measured preparation + first call, by mode

    @property
    def end(self) -> float:
        return math.inf if self.budget_s is None else self.start + self.budget_s

    def elapsed_s(self) -> float:
        return time.monotonic() - self.start

    def remaining_s(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def exploring_left_s(self) -> float:
        """What exploration may still spend: the reserve for the final timing is not theirs."""
        if self.budget_s is None:
            return math.inf
        return max(0.0, self.remaining_s() - FINAL_RESERVE_FRAC * self.budget_s)

    def expected_compile_s(self, mode: str) -> float:
        if not mode:
            return 0.0
        if mode in self.compile_s:
            return self.compile_s[mode]
        seen = {m: s / COMPILE_COST_FACTOR.get(m, 1.0) for m, s in self.compile_s.items()}
        if not seen:
            return FIRST_COMPILE_MIN_S
        return max(seen.values()) * COMPILE_COST_FACTOR.get(mode, 1.0)

    def learn_compile(self, mode: str, seconds: float) -> None:
        if mode:
            self.compile_s[mode] = max(self.compile_s.get(mode, 0.0), seconds)

    def fits(self, cost_s: float) -> bool:
        return cost_s <= self.exploring_left_s()

    def out_of_time_reason(self, cost_s: float) -> str:
        return (f"skipped: expected to take {cost_s:.0f} s, {self.exploring_left_s():.0f} s of the "
                f"--budget-s {self.budget_s:g} left for exploring")
