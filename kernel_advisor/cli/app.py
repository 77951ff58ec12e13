"""The `advisor` Typer app, its global options and the error guard every command uses."""
from __future__ import annotations

import functools
import os
import re
import sys
import traceback
from enum import Enum
from typing import Annotated, Callable, TypeVar

import typer
from typer.core import TyperCommand, TyperGroup

from kernel_advisor.errors import EXIT_CODE_HELP, AdvisorError, ExitCode, as_advisor_error, exception_text

F = TypeVar("F", bound=Callable)


def usage_error_class(bad_parameter: type = typer.BadParameter, name: str = "UsageError") -> type:
    """click's UsageError, the base of every usage error (NoSuchOption, MissingParameter, …), as
    the installed typer raises it. typer >= 0.2x vendors click as typer._click and exports only
    BadParameter, so the class is found in its MRO by name (tests/test_upstream_pins.py pins it);
    failing that, the most general class there with click's usage exit code 2; failing that,
    BadParameter itself (a bad value is still one line; other usage errors keep click's panel)."""
    mro = bad_parameter.__mro__
    named = next((c for c in mro if c.__name__ == name), None)
    if named is not None:
        return named
    usage = [c for c in mro if getattr(c, "exit_code", None) == 2]
    return usage[-1] if usage else bad_parameter


UsageError = usage_error_class()
BadParameter = typer.BadParameter
ClickExit = typer.Exit
# What a flag given a value looks like: `--json true` (the flag takes none).
_FLAG_VALUES = {"true", "false", "yes", "no", "on", "off", "1", "0"}


def _flags_show_no_type(params: list) -> list:
    """Flags take no value, so their help row shows no type.

    Typer's rich help gives every option a type column, flags included (`--json <bool>`),
    which reads as if `--json true` were the way to pass it. An empty metavar is what that
    column shows instead.
    """
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


# What a person reads in --help's type column instead of Python's (`<int>`, `<list[Path]>`).
_METAVARS = {"model": "FILE", "trace": "FILE", "rules": "FILE", "path": "FILE", "output": "FILE",
             "out": "DIR", "run": "RUN", "run_a": "RUN", "run_b": "RUN",
             "warmup": "N", "steps": "N", "top": "N", "seed": "N", "nproc_per_node": "N", "draws": "N",
             "reps": "N", "threads": "N", "entry": "NAME", "region": "NAME", "impl": "NAME", "op": "OP",
             "kernel_ids": "ID", "ids": "ID", "nnodes": "N", "node_rank": "N", "rdzv_endpoint": "HOST:PORT",
             "rdzv_id": "ID", "rdzv_backend": "static|c10d", "node_dirs": "DIR", "workers": "N"}
_BY_TYPE = {"int": "N", "float": "X", "path": "PATH", "str": "TEXT"}


def _readable_metavars(params: list, ctx) -> list:
    """Every value-taking parameter shows a word (FILE, N, RUN, auto|cuda|cpu) and a range in words."""
    for param in params:
        if getattr(param, "is_flag", False):
            continue
        if param.metavar is None:
            shown = _type_text(param, ctx)
            choices = "|" in shown and "[" not in shown
            word = shown if choices else _METAVARS.get(param.name) or _BY_TYPE.get(shown.split()[0], "VALUE")
            if param.param_type_name == "argument":  # NB: an argument's metavar would rename it in the usage line
                param.display_type_rich = lambda ctx, word=word: word
            else:
                param.metavar = word
        low, high = getattr(param, "min", None), getattr(param, "max", None)
        if low is not None or high is not None:
            words = _range_words(low, high)
            param._get_number_range_help_str = lambda words=words: words
    return params


def _type_text(param, ctx) -> str:
    """What typer's rich help would show as the type ("int", "auto|cuda|cpu"); typer releases
    without `display_type_rich` (the GPU image's) get the same words from click's type."""
    show = getattr(param, "display_type_rich", None)
    if show is not None:
        return str(show(ctx) or "").strip("<>")
    kind = getattr(param, "type", None)
    choices = getattr(kind, "choices", None)
    return "|".join(map(str, choices)) if choices else str(getattr(kind, "name", "") or "")


def _range_words(low, high) -> str:
    if low is not None and high is not None:
        return f"{low} to {high}"
    return f"at least {low}" if low is not None else f"at most {high}"


class AdvisorCommand(TyperCommand):
    """A command whose flags (--json, --help, …) show no `<bool>` type in --help."""

    def get_params(self, ctx):
        return _readable_metavars(_flags_show_no_type(super().get_params(ctx)), ctx)


class AdvisorGroup(TyperGroup):
    """Every command's --help ends with the exit codes; usage errors are one line and exit 1.

    Click reports usage errors as a multi-line panel with exit code 2; ours is 1 (bad input),
    2 being the environment, and the same `advisor: error: <problem> — <fix>` line as every
    other error. A group called with nothing after it prints its help and exits 0, as --help does.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            if not command.epilog:
                command.epilog = EXIT_CODE_HELP

    def get_params(self, ctx):
        return _readable_metavars(_flags_show_no_type(super().get_params(ctx)), ctx)

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
    if type(e).__name__ == "NoArgsIsHelpError":
        # `advisor` (or `advisor rules`) with nothing after it: the help is already on stdout,
        # and asking for it is no error.
        e.exit_code = int(ExitCode.OK)  # type: ignore[attr-defined]
        raise e
    ctx = getattr(e, "ctx", None)
    command = ctx.command_path if ctx is not None else "advisor"
    exit_with_line(_usage_line(e, command), int(ExitCode.USER_INPUT))


# Typer's and pydantic's wording that _usage_line rewrites (tests/test_upstream_pins.py checks
# each against what the installed typer prints; where one stops matching, the line keeps
# typer's own text): the value given, in "'float64' is not one of 'keep', …"; pydantic's prefix
# of a validator's ValueError; click's extra-arguments message.
GIVEN_CHOICE = re.compile(r"""('[^']*'|"[^"]*") is not one of""")
PYDANTIC_VALUE_ERROR = "Value error, "
EXTRA_ARGUMENTS = re.compile(r"Got unexpected extra argument(?:s|\(s\))? \((.*)\)")


def _usage_line(e: Exception, command: str) -> str:
    """One `<problem> — <fix>` line for a usage error, without the validator's own wording."""
    message = e.format_message()  # type: ignore[attr-defined]
    param = getattr(e, "param", None)
    choices = _choices(param) if isinstance(e, BadParameter) else None
    if choices:
        # Typer's own wording is "Invalid value for '--dtype': Value error, 'float64' is not one
        # of 'keep', 'float32', …." (pydantic's prefix, quotes, a stray full stop).
        given = GIVEN_CHOICE.search(message)
        what = param.opts[0] if param.opts else param.name
        return f"invalid {what} {given.group(1) if given else 'value'} — use one of {', '.join(choices)}"
    message = message.replace(PYDANTIC_VALUE_ERROR, "")
    extra = EXTRA_ARGUMENTS.fullmatch(message)
    if extra and extra.group(1).lower() in _FLAG_VALUES:
        return (f"unexpected argument '{extra.group(1)}': flags such as --json take no value — pass the "
                f"flag alone to turn it on, leave it out to keep it off")
    return f"{message} — see `{command} --help`"


def _choices(param) -> list[str] | None:
    descriptor = getattr(param, "type_descriptor", None)
    choices = getattr(descriptor, "choices", None) if descriptor is not None else None
    if not choices:
        return None
    return [str(c.value) if isinstance(c, Enum) else str(c) for c in choices]


class AdvisorTyper(typer.Typer):
    """A Typer whose commands are AdvisorCommands (see `_flags_show_no_type`)."""

    def command(self, *args, cls=None, **kwargs):
        return super().command(*args, cls=cls or AdvisorCommand, **kwargs)


def new_typer(**kwargs) -> typer.Typer:
    return AdvisorTyper(cls=AdvisorGroup, pretty_exceptions_enable=False,
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


def exit_with_line(message: str, code: int) -> None:
    # One plain line: rich would wrap it at the terminal width. File names and the model's
    # exception messages are in it, so control characters are escaped (cli/console.py).
    from kernel_advisor.cli.console import printable

    print(f"advisor: error: {printable(message)}", file=sys.stderr, flush=True)
    raise typer.Exit(code)


def guarded(fn: F) -> F:
    """Turn every exception into one stderr line and a documented exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        from kernel_advisor.api import kept_runs

        kept_before = len(kept_runs())
        try:
            return fn(*args, **kwargs)
        except (ClickExit, UsageError):
            raise
        except AdvisorError as e:
            if debug_enabled():
                traceback.print_exc()
            exit_with_line(e.one_line(), int(e.exit_code))
        except KeyboardInterrupt:
            from kernel_advisor.api import interrupted_message

            exit_with_line(interrupted_message(kept_before), 130)
        except BaseException as e:  # noqa: BLE001 - the last line of defence: SystemExit, GeneratorExit too
            if debug_enabled():
                traceback.print_exc()
            ours = as_advisor_error(e)  # a reference kernel's refusal: exit 1 or 2, as ours
            if ours is not None:
                exit_with_line(ours.one_line(), int(ours.exit_code))
            exit_with_line(f"internal error: {exception_text(e)} — rerun with --debug and report it", int(ExitCode.INTERNAL))

    return wrapper  # type: ignore[return-value]
