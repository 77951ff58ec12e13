"""Exit codes and the errors that map to them.

Every command exits with one of these codes; `advisor --help` and docs/cli.md list them.
An AdvisorError carries one line naming the problem and one naming the fix; the CLI
prints both on stderr without a traceback (`--debug` shows it).
"""
from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    USER_INPUT = 1  # the model file, an option, a rules file or a run directory is wrong
    ENVIRONMENT = 2  # this machine lacks something: GPU, triton, nvcc, capability
    CORRECTNESS = 3  # try-kernel: a candidate failed the correctness gate
    INTERNAL = 4  # a bug in kernel_advisor
    GATE = 5  # recommend --fail-if-gain-above: the estimated gain is over the limit


EXIT_CODE_HELP = (
    "Exit codes: 0 success; 1 bad input (model file, option, rules, run dir); "
    "2 environment or capability (no GPU, triton, nvcc); 3 correctness failure in "
    "try-kernel; 4 internal error (please report, rerun with --debug); "
    "5 recommend --fail-if-gain-above exceeded."
)


class AdvisorError(Exception):
    """An error the user can act on: `problem` says what is wrong, `fix` what to do."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, problem: str, fix: str = "") -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix

    def one_line(self) -> str:
        return f"{self.problem} — {self.fix}" if self.fix else self.problem


class UserInputError(AdvisorError):
    exit_code = ExitCode.USER_INPUT


class EnvironmentCapabilityError(AdvisorError):
    exit_code = ExitCode.ENVIRONMENT


class CorrectnessError(AdvisorError):
    exit_code = ExitCode.CORRECTNESS


class GateExceeded(AdvisorError):
    exit_code = ExitCode.GATE


def exception_text(exc: BaseException) -> str:
    """`Type: message` of an exception from code we do not control, on one line, never raising.

    Only the first line of the message: the rest (a tensor's repr, a remote traceback) would
    break the one-line error; `--debug` prints it all. A `__str__` that raises is not ours to fix.
    """
    name = type(exc).__name__
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - the user's __str__
        return f"{name} (its message cannot be shown: str() raised)"
    lines = [line.strip() for line in text.strip().splitlines()]
    first = lines[0] if lines else ""
    more = " …" if len([line for line in lines if line]) > 1 else ""
    return f"{name}: {first}{more}" if first else name


def as_advisor_error(exc: BaseException) -> AdvisorError | None:
    """A reference kernel's refusal as ours: bad input is exit 1, a missing capability exit 2;
    None for any other exception. (reference_kernels raises its own errors: it imports nothing of ours.)"""
    from reference_kernels.errors import KernelInputError, KernelUnavailableError

    if isinstance(exc, KernelInputError):
        return UserInputError(exc.message, exc.fix)
    if isinstance(exc, KernelUnavailableError):
        return EnvironmentCapabilityError(exc.message, exc.fix)
    return None
