"""Two consoles: results to stdout, diagnostics (progress, warnings) to stderr."""
from __future__ import annotations

import os
import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

# Piped output (CI logs, `| less`) gets a wide console instead of rich's 80-column default,
# which would fold the hotspot table into unreadable cells; COLUMNS still wins when set.
_PIPED_WIDTH = None if sys.stdout.isatty() or os.environ.get("COLUMNS") else 200
out = Console(soft_wrap=False, width=_PIPED_WIDTH)
err = Console(stderr=True)


def warn(message: str) -> None:
    print(f"advisor: warning: {message}", file=sys.stderr, flush=True)


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
                print(f"advisor: {phase}: done", file=sys.stderr, flush=True)
            return
        if phase not in tasks:
            tasks[phase] = progress.add_task(phase, total=total)
        progress.update(tasks[phase], completed=done)

    return progress, report
