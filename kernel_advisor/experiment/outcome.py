"""What measuring one action (or the plan) found, in the form recommendations.json stores."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from kernel_advisor.collect.loop_timing import Estimate

STATUSES = ("passed", "failed-gate", "not-applied", "not-measurable", "error")


@dataclass(frozen=True)
class Outcome:
    status: str  # one of STATUSES
    reason: str = ""  # why it is not "passed", or a note on how it passed (reference used)
    applied: str = ""  # what the action changed, for people
    speedup: Estimate | None = None  # eager step / variant step, ratio of medians, 95 % interval
    gain_frac: float | None = None  # 1 - variant / eager: the share of the step it saves
    verdict: str = ""  # "faster", "slower", "no measurable difference", "" when untimed
    step_s: Estimate | None = None
    gate: dict | None = None  # the worst errors the gate saw

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "applied": self.applied,
                "speedup": _interval(self.speedup), "gain_frac": _finite(self.gain_frac),
                "verdict": self.verdict, "step_s": _interval(self.step_s), "gate": self.gate}

    def with_note(self, note: str) -> "Outcome":
        """The same outcome, `note` put before its reason."""
        return replace(self, reason=f"{note}; {self.reason}" if self.reason else note)

    @property
    def measured_gain(self) -> float | None:
        """The saving to rank by: only a verdict of "faster" counts as a gain."""
        return self.gain_frac if self.status == "passed" and self.verdict else None


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _interval(e: Estimate | None) -> dict | None:
    if e is None:
        return None
    return {"value": _finite(e.value), "low": _finite(e.low), "high": _finite(e.high)}
