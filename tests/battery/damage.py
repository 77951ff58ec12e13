"""Ways a run directory or an input file gets damaged, for the battery's setup step.

Each function takes (tmp, run): a scratch directory and a complete run that is `latest`,
and writes the damaged thing under tmp (never touching the complete run).
"""
from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path


def copy_of(run: Path, tmp: Path, name: str) -> Path:
    dst = tmp / name
    shutil.copytree(run, dst)
    return dst


def older_schema(tmp: Path, run: Path) -> None:
    path = copy_of(run, tmp, "old-run")
    meta = json.loads((path / "run.json").read_text())
    meta["schema_version"] = 0
    (path / "run.json").write_text(json.dumps(meta))


def corrupted_run_json(tmp: Path, run: Path) -> None:
    path = copy_of(run, tmp, "corrupt-run")
    text = (path / "run.json").read_text()
    (path / "run.json").write_text(text[: len(text) // 2])  # cut in the middle of an object


def half_written_run(tmp: Path, run: Path) -> None:
    """What a crash would leave if runs were written in place: run.json and no tables."""
    path = tmp / "half-run"
    path.mkdir()
    shutil.copy(run / "run.json", path / "run.json")


def truncated_ops(tmp: Path, run: Path) -> None:
    path = copy_of(run, tmp, "truncated-run")
    text = (path / "ops.csv").read_text()
    (path / "ops.csv").write_text(text[: text.index("\n") + 120])  # header + 120 chars of row 1


def garbage_ops(tmp: Path, run: Path) -> None:
    path = copy_of(run, tmp, "garbage-run")
    (path / "ops.csv").write_text("this is,not an\nop table,at all\n")


def damaged_cell(tmp: Path, run: Path) -> None:
    """One device_time_total_s cell overwritten with text (bit rot, a bad merge, a hand edit)."""
    path = copy_of(run, tmp, "damaged-cell-run")
    with open(path / "ops.csv", newline="") as f:
        header, first, *rest = list(csv.reader(f))
    first[header.index("device_time_total_s")] = "oops"
    with open(path / "ops.csv", "w", newline="") as f:
        csv.writer(f, lineterminator="\n").writerows([header, first, *rest])


def stale_latest(tmp: Path, run: Path) -> None:
    shutil.rmtree(run)  # `latest` still names it


def partial_dir(tmp: Path, run: Path) -> None:
    """The temporary directory of an interrupted profile, passed by hand."""
    path = tmp / ".mlp-20260101-000000.partial-4242"
    path.mkdir()
    (path / "ops.csv").write_text("row_id,name\n0,aten::mm\n")


def binary_model(tmp: Path, run: Path) -> None:
    (tmp / "binary.py").write_bytes(bytes(range(256)) * 4)


def file_as_parent(tmp: Path, run: Path) -> None:
    (tmp / "a-file").write_text("not a directory\n")


def non_empty_out(tmp: Path, run: Path) -> None:
    (tmp / "taken").mkdir()
    (tmp / "taken" / "keep.txt").write_text("mine\n")
