"""Run directories: written under a temporary name, renamed when complete, loaded with checks.

Layout and columns: docs/architecture.md. `latest` is a small text file holding the path of
the last complete run; it is replaced atomically and only after the run's rename, so an
interrupted run never becomes `latest`.
"""
from __future__ import annotations

import errno
import json
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np
import pandas as pd
from pandas.api.types import is_bool_dtype, is_numeric_dtype

from kernel_advisor.collect.interrupts import deferred_sigint, record_kept_run
from kernel_advisor.errors import AdvisorError, EnvironmentCapabilityError, UserInputError
from kernel_advisor.records import columns
from kernel_advisor.records.run import SCHEMA_VERSION, RunMeta, RunRecord

JSON_COLUMNS = ("input_shapes", "input_dtypes", "input_strides", "concrete_inputs", "kernels")
REQUIRED_FILES = ("run.json", "ops.csv", "sequence.csv")
# Columns every reader joins on; the full contract is in docs/architecture.md.
KEY_COLUMNS = {"ops.csv": ("row_id", "name"), "sequence.csv": ("seq", "name")}


def advisor_home() -> Path:
    return Path(os.environ.get("ADVISOR_HOME", ".advisor"))


def runs_root() -> Path:
    return advisor_home() / "runs"


@dataclass(frozen=True)
class LoadedRun:
    """A run directory's three files, read and checked (`load_run`)."""

    path: Path
    meta: RunMeta
    ops: pd.DataFrame
    sequence: pd.DataFrame


# Names default_run_dir handed out in this process, each with the `<stem>-<time>` it counts
# up from: nobody chose them, so when another run takes one first (two profiles of one model
# finishing in the same second) the run goes to the next free `-N` name instead of failing.
_DEFAULT_NAMES: dict[Path, Path] = {}
_MAX_SUFFIX = 10_000


_MAX_STEM_BYTES = 160


def default_run_dir(model_stem: str) -> Path:
    """`<runs>/<stem>-<time>`, or `-2`, `-3`, … when taken; RunWriter keeps it unique at rename time."""
    # A long model name is cut: the name, the time, a `-N` and the `.partial-…` of the
    # temporary directory must fit in the file system's 255 bytes.
    stem = model_stem.encode("utf-8")[:_MAX_STEM_BYTES].decode("utf-8", "ignore")
    base = runs_root() / f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    path = _free_name(base)
    _DEFAULT_NAMES[path] = base
    return path


def _free_name(base: Path) -> Path:
    for n in range(1, _MAX_SUFFIX):
        path = base if n == 1 else base.with_name(f"{base.name}-{n}")
        if not path.exists():
            return path
    raise UserInputError(f"{base.parent} already holds {_MAX_SUFFIX} runs named {base.name}-N",
                         "pass --out, or remove old runs")


class RunWriter:
    """`with RunWriter(final_dir) as tmp:` write into tmp; on success it becomes final_dir.

    On any exception (KeyboardInterrupt included) the partial directory is removed and
    `latest` is left pointing at the last complete run. A name from default_run_dir that
    another run took meanwhile becomes the next free `-N` name; the rename itself is the
    atomic test (rename(2) never replaces a non-empty directory), and `final` says where
    the run went.
    """

    def __init__(self, final: Path, update_latest: bool = True) -> None:
        self.final = Path(final)
        self.update_latest = update_latest
        self.base = _DEFAULT_NAMES.get(self.final)  # None: a name the caller chose (--out)
        # pid and a random part: two writers in one process (threads of the Python API) differ too
        self.tmp = self.final.with_name(f".{self.final.name}.partial-{os.getpid()}-{uuid.uuid4().hex[:8]}")

    def __enter__(self) -> Path:
        if self.base is not None:
            self.final = _free_name(self.base)
        check_writable_target(self.final)
        try:
            self.tmp.mkdir(parents=True)
        except OSError as e:
            raise write_error(self.final, e) from None
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return False
        # Ctrl-C waits for the rename and `latest` (collect/interrupts.py): a run is either not
        # there, or there and `latest`, and the CLI's interrupt line can say which.
        with deferred_sigint():
            try:
                self._rename()
            except BaseException as e:  # e.g. another process created a non-empty directory there meanwhile
                shutil.rmtree(self.tmp, ignore_errors=True)
                if isinstance(e, OSError):
                    raise write_error(self.final, e) from None
                raise
            if self.update_latest:
                set_latest(self.final)
            record_kept_run(self.final, self.update_latest)
        return False

    def _rename(self) -> None:
        if self.base is None:
            if self.final.exists():  # an empty directory the user named with --out
                self.final.rmdir()
            os.replace(self.tmp, self.final)
            return
        for _ in range(_MAX_SUFFIX):
            try:
                os.replace(self.tmp, self.final)
                return
            except OSError as e:
                if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            self.final = _free_name(self.base)  # another run got there first
        raise OSError(errno.EEXIST, "every name is taken", str(self.final))


def write_error(path: Path, e: OSError) -> AdvisorError:
    """An OSError while writing `path`, as the error the user can act on."""
    what = f"cannot write {path}: {e.strerror or e}"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return EnvironmentCapabilityError(what, "free some disk space (or raise the quota) and run again")
    return UserInputError(what, "choose a writable location (a directory you own, not a file)")


def check_writable_target(final: Path) -> None:
    if final in _DEFAULT_NAMES:
        final = _free_name(_DEFAULT_NAMES[final])  # taken meanwhile: RunWriter moves to the next free name
    if final.exists() and (not final.is_dir() or any(final.iterdir())):
        raise UserInputError(f"output directory {final} already exists and is not empty",
                             "choose a new --out directory or remove the old one")
    parent = final.parent
    blocker = next((p for p in (parent, *parent.parents) if p.exists() and not p.is_dir()), None)
    if blocker is not None:
        raise UserInputError(f"cannot create {final}: {blocker} is a file, not a directory",
                             "choose an --out path whose parent directories are directories")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserInputError(f"cannot create {parent}: {e.strerror}",
                             "choose a writable --out directory") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserInputError(f"{parent} is not writable", "choose a writable --out directory")


def set_latest(run_dir: Path) -> None:
    root = runs_root()
    root.mkdir(parents=True, exist_ok=True)
    run_dir = Path(run_dir).resolve()
    try:
        text = str(run_dir.relative_to(root.resolve()))
    except ValueError:
        text = str(run_dir)
    write_text_atomic(root / "latest", text + "\n")


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path, data: bytes) -> None:
    with atomic_target(path) as tmp:
        tmp.write_bytes(data)


@contextmanager
def atomic_target(path: Path) -> Iterator[Path]:
    """`with atomic_target(p) as tmp:` write tmp; it is renamed to p only when the block succeeds.

    Readers see all of the file or none of it. A failure (disk full, interrupt, unwritable
    directory) removes the temporary file; an OSError becomes the error the user can act on.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise write_error(path, e) from None
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    write_text_atomic(Path(path), json.dumps(obj, indent=2, default=_json_default) + "\n")


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def write_table(path: Path, df: pd.DataFrame) -> None:
    out = df.copy()
    for col in JSON_COLUMNS:
        if col in out.columns:
            out[col] = [v if isinstance(v, str) else json.dumps(v) for v in out[col]]
    with atomic_target(path) as tmp:
        out.to_csv(tmp, index=False)


def read_table(path: Path, renamed: Mapping[str, str] | None = None) -> pd.DataFrame:
    """A table written by write_table, its columns renamed by `renamed` (old -> new) first;
    ValueError when it is truncated or holds damaged values."""
    _check_not_truncated(path)
    df = pd.read_csv(path, keep_default_na=False, na_values=[""]).rename(columns=dict(renamed or {}))
    damaged = [c for c in columns.NUMERIC_COLUMNS if c in df.columns and len(df) and not is_numeric_dtype(df[c])]
    if damaged:
        raise ValueError(f"{path.name}: non-numeric values in {', '.join(damaged)}")
    for col in JSON_COLUMNS:
        if col in df.columns:
            try:
                df[col] = [json.loads(v) if isinstance(v, str) else [] for v in df[col]]
            except json.JSONDecodeError as e:
                raise ValueError(f"{path.name}: a {col} cell is not JSON ({e})") from None
            except RecursionError:
                raise ValueError(f"{path.name}: a {col} cell is JSON nested too deeply to read") from None
    for col in ("name", "kind", "region", "kernel_file", "verdict", "compute_path"):
        if col in df.columns:
            df[col] = df[col].astype(object).fillna("").astype(str)  # an all-empty column reads as float NaN
    return df


def _check_not_truncated(path: Path) -> None:
    # pandas fills a row cut short with NaN without a word; write_table always ends with a newline.
    with open(path, "rb") as f:
        if f.seek(0, os.SEEK_END) == 0:
            return  # empty: pandas itself reports "No columns to parse"
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b"\n":
            raise ValueError(f"{path.name} is truncated (its last line is cut short)")


def resolve_run(run: str | Path | None = None) -> Path:
    """A run directory from an explicit path or, when None, from `latest`."""
    if run is not None:
        path = Path(run)
        if path.is_file() and path.suffix == ".py":
            raise UserInputError(f"{path} is a model file; this command reads a run directory",
                                 f"profile it first (`advisor profile {path}`), then pass the run directory "
                                 "(or nothing, for the latest run)")
        if not path.is_dir():
            raise UserInputError(f"run directory {path} does not exist",
                                 "pass a directory written by `advisor profile` or `advisor import`")
        return path
    latest = runs_root() / "latest"
    if not latest.is_file():
        raise UserInputError(f"no run yet (no {latest})",
                             "run `advisor profile MODEL.py` first, or pass a run directory")
    path = _latest_target(latest)
    if not path.is_dir():
        raise UserInputError(f"{latest} points at {path}, which no longer exists",
                             "run `advisor profile MODEL.py` again, or pass a run directory")
    return path


def _latest_target(latest: Path) -> Path:
    """The run `latest` names; a file damaged into binary or a runaway size is refused."""
    fix = "run `advisor profile MODEL.py` again, or pass a run directory"
    with open(latest, "rb") as f:
        data = f.read(_MAX_LATEST_BYTES + 1)
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        text = ""
    if len(data) > _MAX_LATEST_BYTES or not text or not text.isprintable():
        raise UserInputError(f"{latest} is damaged: it does not hold the path of a run", fix)
    target = Path(text)
    return target if target.is_absolute() else runs_root() / target


_MAX_LATEST_BYTES = 4096  # PATH_MAX: a path longer than this names no directory


def load_run(path: str | Path) -> LoadedRun:
    path = Path(path)
    missing = [f for f in REQUIRED_FILES if not (path / f).is_file()]
    if missing:
        raise UserInputError(f"{path} is not a complete run (missing {', '.join(missing)})",
                             "profile again; runs are only complete once `advisor profile` finishes")
    record = RunRecord.read(path / "run.json")  # schema and types checked there
    version = record.schema_version
    try:
        ops = read_table(path / "ops.csv", columns.renames(version, columns.OPS))
        sequence = read_table(path / "sequence.csv", columns.renames(version, columns.SEQUENCE))
    except (ValueError, pd.errors.ParserError) as e:
        raise UserInputError(f"{path} has a corrupted table: {e}",
                             "profile again to write a fresh run") from None
    # what readers cannot do without (records/columns.py); older runs lack first_seq and max_blocks
    _check_table(path / "ops.csv", ops, columns.OPS_REQUIRED)
    _check_table(path / "sequence.csv", sequence, columns.SEQUENCE_REQUIRED)
    _check_values(path / "ops.csv", ops, columns.OPS_NON_NEGATIVE, columns.OPS_REQUIRED_NUMBERS)
    _check_values(path / "sequence.csv", sequence, columns.SEQUENCE_NON_NEGATIVE, ())
    _check_ops_totals(path / "ops.csv", ops, record.values.get("total_device_time_s"))
    if "kernels" in ops.columns:
        ops["kernels"] = [columns.renamed_items(k, columns.renames(version, columns.KERNELS)) for k in ops["kernels"]]
    return LoadedRun(path=path, meta=record.current_meta(), ops=ops, sequence=sequence)


def _check_table(path: Path, table: pd.DataFrame, required: tuple[str, ...]) -> None:
    """Every column the readers use, and at least one row: one line naming the file otherwise."""
    fix = "profile again to write a fresh run"
    missing = [c for c in KEY_COLUMNS[path.name] if c not in table.columns]
    if missing:
        raise UserInputError(f"{path} is not a run table (no {', '.join(missing)} column)", fix)
    missing = [c for c in required if c not in table.columns]
    if path.name == "ops.csv":
        analysed = [c for c in columns.ANALYSIS_COLUMNS if c in table.columns]
        if analysed:  # analysed: all of analyze's columns or none (docs/architecture.md)
            missing += [c for c in columns.ANALYSIS_COLUMNS if c not in table.columns]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise UserInputError(f"{path} is damaged: it lacks the column{'s' if len(missing) > 1 else ''} {shown}",
                             fix)
    if table.empty:
        # profile and import refuse to write a run without ops: this one was emptied afterwards
        raise UserInputError(f"{path} is damaged: it has a header but no rows", fix)


def _check_values(path: Path, table: pd.DataFrame, non_negative: tuple[str, ...], required: tuple[str, ...]) -> None:
    """Numbers no profile writes (records/columns.py): ±inf anywhere, a negative value in
    `non_negative`, an empty cell (NaN) in `required`; one line naming the file, column and row."""
    for col in table.columns:
        if not is_numeric_dtype(table[col]) or is_bool_dtype(table[col]):
            continue
        values = table[col].astype(float)
        for bad, what in ((values.isna() if col in required else None, "an empty cell where a number is required"),
                          (np.isinf(values), "an infinite value"),
                          (values < 0 if col in non_negative else None, "a negative value")):
            if bad is not None and bad.any():
                raise UserInputError(f"{path} is damaged: column {col} holds {what} "
                                     f"({_row_text(table, int(np.flatnonzero(bad.to_numpy())[0]))})",
                                     "profile again to write a fresh run")


# An op's device time, or all of theirs together, above the run's total device time (run.json
# total_device_time_s) is impossible: both sum the same kernels' durations (collect/attribute.py),
# and a sum of durations, unlike the step's wall time, already counts overlapping streams in full.
# The slack covers rounding only; share_pct is the same ratio in percent.
TOTAL_SLACK = 1e-3


def _check_ops_totals(path: Path, ops: pd.DataFrame, total_s: Any) -> None:
    fix = "profile again to write a fresh run"
    limits = [("share_pct", 100.0, "100 %, the whole of the run's device time")]
    if isinstance(total_s, (int, float)) and not isinstance(total_s, bool):
        limits.insert(0, ("device_time_total_s", float(total_s),
                          f"the run's total device time ({total_s:.6g} s, run.json total_device_time_s)"))
    for col, limit, what in limits:
        values = ops[col].astype(float)
        ceiling = limit * (1 + TOTAL_SLACK) + 1e-12
        worst = int(values.to_numpy().argmax())
        if values.iloc[worst] > ceiling:
            raise UserInputError(f"{path} is damaged: column {col} holds {values.iloc[worst]:.6g} "
                                 f"({_row_text(ops, worst)}), more than {what}", fix)
        if values.sum() > ceiling:
            raise UserInputError(f"{path} is damaged: column {col} sums to {values.sum():.6g} over the ops, "
                                 f"more than {what}", fix)


def _row_text(table: pd.DataFrame, index: int) -> str:
    """"data row 3, "aten::mm"": the 1-based row under the header, and its op's name, escaped."""
    name = table["name"].iloc[index] if "name" in table.columns else ""
    return f"data row {index + 1}" + (f", {json.dumps(name[:60], ensure_ascii=False)}" if name else "")
