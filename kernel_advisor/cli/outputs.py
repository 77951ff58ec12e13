"""Where a command may write a file the user named: never over something we did not create.

`report -o`, `roofline -o` and every other user-named output file pass through
`check_output_file` before any work. It refuses
- a path that is not a regular file now (a directory, a device such as /dev/full, a FIFO,
  a symbolic link): the atomic rename would replace the node itself;
- a run directory's own record files (run.json, ops.csv, ...), and the model file a run
  names: replacing those loses the run or the user's code;
- any other existing file that is not of the kind we write (`notes.txt` for an HTML
  report), unless --force says it may go.
An existing file of the output's kind (an older report.html) is replaced, as always.
"""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Iterable

from kernel_advisor.errors import UserInputError
from kernel_advisor.records.run import RunMeta

# What a run directory holds besides the reports and charts written into it.
RUN_RECORD_FILES = frozenset({"run.json", "ops.csv", "sequence.csv", "trace.json", "trace.json.gz",
                              "recommendations.json", "try_kernel.json", "ranks.json"})


def check_output_file(path: Path, kinds: Iterable[str], force: bool, option: str = "-o") -> None:
    """Refuse `path` as an output unless writing it replaces only what we wrote (module docstring).

    `kinds`: the suffixes of what the command writes (".html"); `force`: --force was given.
    """
    kinds = tuple(kinds)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        info = None
    except OSError as e:
        raise UserInputError(f"cannot check the output {path}: {e.strerror}", f"choose another {option}") from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        what = "a directory" if stat.S_ISDIR(info.st_mode) else \
            "a symbolic link" if stat.S_ISLNK(info.st_mode) else "not a regular file (a device, FIFO or socket)"
        raise UserInputError(f"the output {path} is {what}, and writing it would replace it",
                             f"choose a new file name for {option}")
    _refuse_run_records(path, option)
    if info is None:
        return
    if path.suffix.lower() not in kinds and not force:
        raise UserInputError(
            f"the output {path} already exists and is not a {'/'.join(kinds)} file this command wrote",
            f"choose another {option}, or pass --force to replace it")


def _refuse_run_records(path: Path, option: str) -> None:
    target = _resolved(path)
    if path.name in RUN_RECORD_FILES and (path.parent / "run.json").is_file():
        raise UserInputError(f"the output {path} is one of the run directory's own records",
                             f"choose another {option} (a report or chart beside them is fine)")
    model = model_file_of(path.parent)
    if model is not None and _resolved(model) == target:
        raise UserInputError(f"the output {path} is the model file the run was profiled from",
                             f"choose another {option}")


def _resolved(path: Path) -> Path:
    try:
        return Path(os.path.realpath(path))
    except (OSError, ValueError):
        return Path(os.path.abspath(path))


def model_file_of(directory: Path) -> Path | None:
    """The model file named by a run.json in `directory`, if there is one (read leniently:
    this is only a guard, the run itself is checked where it is loaded)."""
    try:
        name = RunMeta.of(json.loads((directory / "run.json").read_text(encoding="utf-8"))).model_file
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    return Path(name) if isinstance(name, str) and name else None


def check_not_model_file(path: Path, model_file: Path | None, option: str = "-o") -> None:
    """Refuse `path` when it is the model file (a run's, or the one on the command line)."""
    if model_file is not None and _resolved(path) == _resolved(Path(model_file)):
        raise UserInputError(f"the output {path} is the model file the run was profiled from",
                             f"choose another {option}")
