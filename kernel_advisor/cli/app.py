"""The `advisor` Typer app, its global options and the error guard every command uses."""
from __future__ import annotations

import functools
import os
import sys
import traceback
from typing import Annotated, Callable, TypeVar

import typer
from typer.core import TyperGroup

from kernel_advisor.errors import EXIT_CODE_HELP, AdvisorError, ExitCode

F = TypeVar("F", bound=Callable)
# Newer typer vendors its own click; take the classes from typer's own exceptions.
UsageError = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
ClickExit = typer.Exit


class AdvisorGroup(TyperGroup):
    """Click reports usage errors with exit code 2; ours is 1 (bad input), 2 is the environment."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except UsageError as e:
            e.exit_code = ExitCode.USER_INPUT
            raise

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UsageError as e:
            e.exit_code = ExitCode.USER_INPUT
            raise


def new_typer(**kwargs) -> typer.Typer:
    return typer.Typer(cls=AdvisorGroup, pretty_exceptions_enable=False,
                       epilog=EXIT_CODE_HELP, **kwargs)


app = new_typer(
    help="Profile a PyTorch model, place its hotspots on the device roofline, and say "
    "whether a custom kernel is worth writing — and what to do instead.",
    no_args_is_help=True,
)
_STATE = {"debug": os.environ.get("ADVISOR_DEBUG", "") not in ("", "0")}


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")] = False,
) -> None:
    if debug:
        _STATE["debug"] = True


def debug_enabled() -> bool:
    return _STATE["debug"]


def fail(message: str, code: int) -> None:
    # One plain line: rich would wrap it at the terminal width.
    print(f"advisor: error: {message}", file=sys.stderr, flush=True)
    raise typer.Exit(code)


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
        except KeyboardInterrupt:
            fail("interrupted — nothing partial was kept; the last complete run is unchanged", 130)
        except Exception as e:  # noqa: BLE001 - the last line of defence is the point
            if debug_enabled():
                traceback.print_exc()
            fail(f"internal error: {type(e).__name__}: {e} — rerun with --debug and report it",
                 int(ExitCode.INTERNAL))

    return wrapper  # type: ignore[return-value]
