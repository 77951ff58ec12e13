"""`--emit-plan plan.py`: the measured plan as a module a training script imports.

The module holds the plan's action names and calls `apply_plan` (apply.py), so the script
runs exactly what was measured. A file is written only where none is, or where one we wrote
before is (its first line says so): nothing the user wrote is replaced.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from kernel_advisor.collect.rundir import write_text_atomic
from kernel_advisor.errors import UserInputError

MARK = "# Written by `advisor recommend --measure --emit-plan`"


def plan_module(actions: Sequence[str], mode: str, summary: str) -> str:
    """The module's text: `apply_plan(model, example_inputs) -> model`."""
    return f'''{MARK}: the measured plan as code.
"""{summary}

    from plan import apply_plan
    model = apply_plan(model, example_inputs)  # before building the optimizer
"""
from kernel_advisor.experiment.apply import apply_plan as _apply_plan

PLAN = {tuple(actions)!r}
MODE = {mode!r}


def apply_plan(model, example_inputs):
    """`model` with the measured plan applied (the same action code `--measure` timed)."""
    return _apply_plan(model, example_inputs, PLAN, mode=MODE)
'''


def check_plan_path(path: Path) -> None:
    """Refuse, before any measuring, a path the plan module may not be written to."""
    path = Path(path)
    if path.suffix != ".py":
        raise UserInputError(f"--emit-plan {path.name}: not a .py file", "name a module, e.g. --emit-plan plan.py")
    if path.exists() and (not path.is_file() or not _ours(path)):
        raise UserInputError(f"--emit-plan {path}: the file exists and was not written by advisor",
                             "choose a new file name, or remove that file first")


def write_plan_module(path: Path, actions: Sequence[str], mode: str, summary: str) -> Path:
    path = Path(path)
    check_plan_path(path)
    # The summary lands in a docstring: printable characters only, no backslash, no closing quotes.
    safe = "".join(c for c in summary if c.isprintable()).replace("\\", "/").replace('"""', "'''")
    write_text_atomic(path, plan_module(actions, mode, safe))
    return path


def _ours(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.readline().startswith(MARK)
    except OSError:
        return False
