"""Two consoles: results to stdout, diagnostics (progress, warnings) to stderr.

Both are the one place where text reaches the terminal, so both make it safe there: op
names, regions, file names and exception messages come from the user's model, trace or
file system, and an escape sequence in one (colours, OSC 8 hyperlinks, a cleared screen)
must show as text, never act. Rich markup is off (a name like `[link=…]` prints as
written), and every control character is written as a `\\uXXXX` escape, which also keeps
`--json` output valid JSON.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
from typing import Iterator, TextIO

from rich.console import Console
from rich.segment import Segment
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

# Piped output (CI logs, `| less`) gets a wide console instead of rich's 80-column default,
# which would fold the hotspot table into unreadable cells; COLUMNS still wins when set.
_PIPED_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200
# C0 and C1 controls but newline and tab, DEL, and the bidirectional overrides that can
# make a name read differently from what it is.
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """`text` with every control character written as a visible \\uXXXX escape."""
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _escaped(segments):
    for segment in segments:
        # Control segments are rich's own cursor moves (progress bars), not text.
        if segment.control or not _UNSAFE.search(segment.text):
            yield segment
        else:
            yield Segment(printable(segment.text), segment.style, segment.control)


class SafeConsole(Console):
    """A rich Console that never interprets markup and never writes a control character
    it did not generate itself (see the module docstring)."""

    def __init__(self, **kwargs) -> None:
        super().__init__(markup=False, emoji=False, **kwargs)

    def render_str(self, text: str, **kwargs):
        # Escaped before layout, so table columns are measured on what is printed.
        kwargs["markup"] = False
        return super().render_str(printable(text), **kwargs)

    def _render_buffer(self, buffer) -> str:
        # The net under everything: Text objects built by the renderers skip render_str.
        return super()._render_buffer(_escaped(buffer))


out = SafeConsole(soft_wrap=False, width=_PIPED_WIDTH)
err = SafeConsole(stderr=True)


def write_out(text: str) -> None:
    """Plain text (markdown, a path) to stdout, made printable as the consoles do."""
    sys.stdout.write(printable(text))
    sys.stdout.flush()


def warn(message: str) -> None:
    print(f"advisor: warning: {printable(message)}", file=err.file, flush=True)


@contextlib.contextmanager
def diagnostics_to(stream: TextIO) -> Iterator[None]:
    """Our stderr lines (warnings, progress) to `stream` while fd 2 is diverted elsewhere (the
    compilers' log during `--measure`)."""
    saved = err._file  # NB: None means "sys.stderr as it is at each write"; keep that, not today's object
    err.file = stream
    try:
        yield
    finally:
        err._file = saved


def step_progress(enabled: bool = True, lines_when_piped: bool = False):
    """A rich progress bar on stderr, and the callback the collect layer reports to.

    With `lines_when_piped`, a stderr that is no terminal gets one line per finished phase
    instead (long runs in CI logs still show where they are).
    """
    progress = Progress(TextColumn("{task.description:<26}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=err, transient=True,
                        # a transient bar on a non-terminal stderr leaves a stray blank line in logs
                        disable=not enabled or not err.is_terminal)
    tasks: dict[str, int] = {}

    def report(phase: str, done: int, total: int) -> None:
        if lines_when_piped and enabled and not err.is_terminal:
            if done == total and tasks.setdefault(phase, done) == done:
                print(f"advisor: {phase}: done", file=err.file, flush=True)
            return
        if phase not in tasks:
            tasks[phase] = progress.add_task(phase, total=total)
        progress.update(tasks[phase], completed=done)

    return progress, report
