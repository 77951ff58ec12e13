"""The `advisor` Typer app, its global options and the error guard every command uses."""
from __future__ import annotations

import functools
import os
import sys
import traceback
from typing import Annotated, Callable, TypeVar

import typer
from typer.core import TyperGroup

from reference_kernels.errors import KernelInputError, KernelUnavailableError

from kernel_advisor.errors import (EXIT_CODE_HELP, AdvisorError, EnvironmentCapabilityError, ExitCode,
                                   UserInputError)

F = TypeVar("F", bound=Callable)
# Newer typer vendors its own click; take the classes from typer's own exceptions.
UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
ClickExit = typer.Exit


class AdvisorGroup(TyperGroup):
    """Every command's --help ends with the exit codes; usage errors are one line and exit 1.

    Click reports usage errors as a multi-line panel with exit code 2; ours is 1 (bad input),
    2 being the environment, and the same `advisor: error: <problem> — <fix>` line as every
    other error.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            if not command.epilog:
                command.epilog = EXIT_CODE_HELP

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except UsageError as e:
            _usage_error(e)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UsageError as e:
            _usage_error(e)


def _usage_error(e: Exception) -> None:
    if type(e).__name__ == "NoArgsIsHelpError":  # `advisor` with nothing after it: the help, exit 1
        e.exit_code = ExitCode.USER_INPUT  # type: ignore[attr-defined]
        raise e
    ctx = getattr(e, "ctx", None)
    command = ctx.command_path if ctx is not None else "advisor"
    fail(f"{e.format_message()} — see `{command} --help`", int(ExitCode.USER_INPUT))  # type: ignore[attr-defined]


def new_typer(**kwargs) -> typer.Typer:
    return typer.Typer(cls=AdvisorGroup, pretty_exceptions_enable=False,
                       epilog=EXIT_CODE_HELP, **kwargs)


app = new_typer(
    help="Profile a PyTorch model, place its hotspots on the device roofline, and say "
    "whether a custom kernel is worth writing — and what to do instead.",
    no_args_is_help=True,
)


def _debug_from_env() -> bool:
    return os.environ.get("ADVISOR_DEBUG", "") not in ("", "0")


_STATE = {"debug": _debug_from_env()}


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option(
        "--debug", help="Show full tracebacks on errors (or set ADVISOR_DEBUG=1).")] = False,
) -> None:
    # Assigned on every invocation: one `--debug` must not leak into the next in-process call.
    _STATE["debug"] = debug or _debug_from_env()


def debug_enabled() -> bool:
    return _STATE["debug"]


def fail(message: str, code: int) -> None:
    # One plain line: rich would wrap it at the terminal width.
    print(f"advisor: error: {message}", file=sys.stderr, flush=True)
    raise typer.Exit(code)


def kernel_error(e: KernelInputError | KernelUnavailableError) -> AdvisorError:
    """A reference kernel's refusal as our error: bad input is exit 1, a missing capability exit 2."""
    kind = UserInputError if isinstance(e, KernelInputError) else EnvironmentCapabilityError
    return kind(e.message, e.fix)


def guarded(fn: F) -> F:
    """Turn every exception into one stderr line and a documented exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ClickExit, UsageError):
            raise
        except AdvisorError as e:
            if debug_enabled():
                traceback.print_exc()
            fail(e.one_line(), int(e.exit_code))
        except (KernelInputError, KernelUnavailableError) as e:
            if debug_enabled():
                traceback.print_exc()
            ours = kernel_error(e)
            fail(ours.one_line(), int(ours.exit_code))
        except KeyboardInterrupt:
            fail("interrupted — nothing partial was kept; the last complete run is unchanged", 130)
        except Exception as e:  # noqa: BLE001 - the last line of defence is the point
            if debug_enabled():
                traceback.print_exc()
            fail(f"internal error: {type(e).__name__}: {e} — rerun with --debug and report it",
                 int(ExitCode.INTERNAL))

    return wrapper  # type: ignore[return-value]
