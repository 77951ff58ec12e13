"""The two ways a reference kernel refuses, as plain exceptions with a `fix` line.

reference_kernels depends on torch and triton only; kernel_advisor translates these into
its own errors and exit codes (cli/app.py), so the two packages form no circle.
"""
from __future__ import annotations


class KernelInputError(ValueError):
    """A call the kernel does not take (dtype, shape, layout, option), or an unknown kernel id."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message, self.fix = message, fix


class KernelUnavailableError(RuntimeError):
    """The kernel cannot run on this machine: no GPU, no nvcc, an old architecture, a failed build."""

    def __init__(self, message: str, fix: str = "") -> None:
        super().__init__(message)
        self.message, self.fix = message, fix
