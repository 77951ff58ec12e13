"""What one try-kernel invocation compares: options, candidate sets and their gate state."""
from __future__ import annotations

import contextlib
import functools
from dataclasses import dataclass, field

import torch

from kernel_advisor.trykernel.calls import CallLog
from kernel_advisor.trykernel.candidates import Candidate, installed

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
