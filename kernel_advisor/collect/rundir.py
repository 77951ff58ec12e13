"""Run directories: written under a temporary name, renamed when complete, loaded with checks.

Layout and columns: docs/architecture.md. `latest` is a small text file holding the path of
the last complete run; it is replaced atomically and only after the run's rename, so an
interrupted run never becomes `latest`.
"""
from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from kernel_advisor.errors import UserInputError

SCHEMA_VERSION = 1
JSON_COLUMNS = ("input_shapes", "input_dtypes", "input_strides", "concrete_inputs", "kernels")
REQUIRED_FILES = ("run.json", "ops.csv", "sequence.csv")


def advisor_home() -> Path:
    return Path(os.environ.get("ADVISOR_HOME", ".advisor"))


def runs_root() -> Path:
    return advisor_home() / "runs"


@dataclass(frozen=True)
class Run:
    path: Path
    meta: dict
    ops: pd.DataFrame
    sequence: pd.DataFrame


def default_run_dir(model_stem: str) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = runs_root() / f"{model_stem}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


class RunWriter:
    """`with RunWriter(final_dir) as tmp:` write into tmp; on success it becomes final_dir.

    On any exception (KeyboardInterrupt included) the partial directory is removed and
    `latest` is left pointing at the last complete run.
    """

    def __init__(self, final: Path, update_latest: bool = True) -> None:
        self.final = Path(final)
        self.update_latest = update_latest
        self.tmp = self.final.with_name(f".{self.final.name}.partial-{os.getpid()}")

    def __enter__(self) -> Path:
        check_writable_target(self.final)
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp.mkdir(parents=True)
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return False
        if self.final.exists():  # an empty directory the user named with --out
            self.final.rmdir()
        os.replace(self.tmp, self.final)
        if self.update_latest:
            set_latest(self.final)
        return False


def check_writable_target(final: Path) -> None:
    if final.exists() and (not final.is_dir() or any(final.iterdir())):
        raise UserInputError(f"output directory {final} already exists and is not empty",
                             "choose a new --out directory or remove the old one")
    parent = final.parent
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
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


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
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    out.to_csv(tmp, index=False)
    os.replace(tmp, path)


def read_table(path: Path) -> pd.DataFrame:
    df = pd.read_csv(path, keep_default_na=False, na_values=[""])
    for col in JSON_COLUMNS:
        if col in df.columns:
            df[col] = [json.loads(v) if isinstance(v, str) else [] for v in df[col]]
    for col in ("name", "kind", "region", "kernel_file", "verdict", "compute_path"):
        if col in df.columns:
            df[col] = df[col].fillna("").astype(str)
    return df


def resolve_run(run: str | Path | None = None) -> Path:
    """A run directory from an explicit path or, when None, from `latest`."""
    if run is not None:
        path = Path(run)
        if not path.is_dir():
            raise UserInputError(f"run directory {path} does not exist",
                                 "pass a directory written by `advisor profile` or `advisor import`")
        return path
    latest = runs_root() / "latest"
    if not latest.is_file():
        raise UserInputError(f"no run yet (no {latest})",
                             "run `advisor profile MODEL.py` first, or pass a run directory")
    target = Path(latest.read_text(encoding="utf-8").strip())
    path = target if target.is_absolute() else runs_root() / target
    if not path.is_dir():
        raise UserInputError(f"{latest} points at {path}, which no longer exists",
                             "run `advisor profile MODEL.py` again, or pass a run directory")
    return path


def load_run(path: str | Path) -> Run:
    path = Path(path)
    missing = [f for f in REQUIRED_FILES if not (path / f).is_file()]
    if missing:
        raise UserInputError(f"{path} is not a complete run (missing {', '.join(missing)})",
                             "profile again; runs are only complete once `advisor profile` finishes")
    meta = _load_meta(path / "run.json")
    try:
        ops = read_table(path / "ops.csv")
        sequence = read_table(path / "sequence.csv")
    except (ValueError, pd.errors.ParserError) as e:
        raise UserInputError(f"{path} has a corrupted table: {e}",
                             "profile again to write a fresh run") from None
    return Run(path=path, meta=meta, ops=ops, sequence=sequence)


def _load_meta(path: Path) -> dict:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserInputError(f"{path} is corrupted ({e})", "profile again to write a fresh run") from None
    if not isinstance(meta, dict):
        raise UserInputError(f"{path} is not a run.json object", "profile again to write a fresh run")
    version = meta.get("schema_version")
    if version != SCHEMA_VERSION:
        raise UserInputError(
            f"{path.parent} was written with run schema {version}, this advisor reads schema {SCHEMA_VERSION}",
            "profile the model again with this version")
    return meta
