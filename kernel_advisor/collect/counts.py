"""The step counts a profile takes, checked before anything heavy is imported or run."""
from __future__ import annotations

from kernel_advisor.errors import UserInputError


def validate_counts(warmup: int, steps: int) -> None:
    if steps < 1:
        raise UserInputError(f"--steps must be at least 1 (got {steps})", "use --steps 5, for example")
    if warmup < 0:
        raise UserInputError(f"--warmup cannot be negative (got {warmup})", "use --warmup 3, for example")
