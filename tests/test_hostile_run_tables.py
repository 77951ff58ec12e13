"""Run tables damaged into impossible numbers: `report` and `recommend` refuse them with one
line naming the file and the column, exit 1, and write nothing; real runs still load."""
from __future__ import annotations

import csv
import io
import shutil
import tarfile
from pathlib import Path

import pytest

from battery.checks import invoke, previous_run
from battery.hostile import fails_cleanly
from battery.hostile import home  # noqa: F401 - fixture
from kernel_advisor.collect.rundir import load_run

GPU_RUNS = Path(__file__).parent / "data" / "gpu_runs.tar.gz"
# previous_run's ops (run_factory.gpt_like_ops), by name: 4.0 ms of device time in all.
LINEAR, SOFTMAX, TOTAL_S = "aten::linear", "aten::_softmax", 4.0e-3


def edit_table(path: Path, edits: dict[tuple[str, str], str]) -> None:
    """Set cells of a run table, each addressed by (op name, column), leaving the rest byte-for-byte."""
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    for (name, column), value in edits.items():
        row = next(r for r in rows if r["name"] == name)
        assert column in row, column
        row[column] = value
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(out.getvalue())


def files_under(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


DAMAGE = {  # id: (table, {(op, column): cell}, what the line says besides the file)
    "negative-time": ("ops.csv", {(LINEAR, "device_time_total_s"): "-0.002"},
                      ("column device_time_total_s holds a negative value", '"aten::linear"')),
    "inf-time": ("ops.csv", {(LINEAR, "device_time_total_s"): "inf"},
                 ("column device_time_total_s holds an infinite value",)),
    "overflowing-time": ("ops.csv", {(SOFTMAX, "device_time_per_call_s"): "1e400"},
                         ("column device_time_per_call_s holds an infinite value",)),
    "nan-time": ("ops.csv", {(LINEAR, "device_time_total_s"): ""},
                 ("column device_time_total_s holds an empty cell where a number is required",)),
    "negative-calls": ("ops.csv", {(SOFTMAX, "calls"): "-2"}, ("column calls holds a negative value",)),
    "inf-share": ("ops.csv", {(LINEAR, "share_pct"): "inf"}, ("column share_pct holds an infinite value",)),
    "inf-analysis": ("ops.csv", {(LINEAR, "achieved_flops_per_s"): "-inf"},
                     ("column achieved_flops_per_s holds an infinite value",)),
    "negative-flops": ("ops.csv", {(LINEAR, "flops_per_call"): "-1.37e11"},
                       ("column flops_per_call holds a negative value",)),
    # 1186.9 % of the run's device time, in one op: more than all of the run's kernels took.
    "op-above-total": ("ops.csv", {(LINEAR, "device_time_total_s"): repr(11.869 * TOTAL_S)},
                       ("column device_time_total_s holds 0.047476", "more than the run's total device time",
                        "total_device_time_s")),
    # Each op under the total, together 2.7 ms over it.
    "ops-sum-above-total": ("ops.csv", {(SOFTMAX, "device_time_total_s"): "3.9e-3"},
                            ("column device_time_total_s sums to 0.0067", "more than the run's total device time")),
    "share-above-100": ("ops.csv", {(LINEAR, "share_pct"): "1186.9"},
                        ("column share_pct holds 1186.9", "more than 100 %")),
    "shares-sum-above-100": ("ops.csv", {(LINEAR, "share_pct"): "90.0"},
                             ("column share_pct sums to 140", "more than 100 %")),
    "negative-sequence-time": ("sequence.csv", {(LINEAR, "device_time_per_call_s"): "-5e-4"},
                               ("column device_time_per_call_s holds a negative value",)),
}


@pytest.mark.parametrize("command", ["report", "recommend"])
@pytest.mark.parametrize("case", list(DAMAGE))
def test_damaged_table_is_refused(home, tmp_path, command, case):
    table, edits, says = DAMAGE[case]
    run = previous_run(home)
    edit_table(run / table, edits)
    before = files_under(tmp_path)
    line = fails_cleanly(invoke(command, run), 1, (f"{run / table} is damaged", *says))
    assert "profile again to write a fresh run" in line
    assert files_under(tmp_path) == before  # no report.html, no recommendations.json


def test_damaged_latest_run_is_refused_too(home, tmp_path):
    run = previous_run(home)
    edit_table(run / "ops.csv", {(LINEAR, "device_time_total_s"): "inf"})
    fails_cleanly(invoke("report"), 1, ("ops.csv is damaged", "device_time_total_s"))


@pytest.mark.parametrize("edits", [
    {(LINEAR, "intensity"): "", (LINEAR, "achieved_flops_per_s"): "", (LINEAR, "efficiency_frac"): ""},
    {(LINEAR, "headroom_total_s"): "-1e-4"},  # runs from before analyze clipped it at 0
    {(LINEAR, "device_time_total_s"): repr(2.0e-3 * (1 + 1e-7))},  # the ops' sum a hair over the total
], ids=["blank-analysis", "negative-headroom", "rounding"])
def test_tolerated_values_still_load(home, edits):
    run = previous_run(home)
    edit_table(run / "ops.csv", edits)
    assert len(load_run(run).ops) == 6


def test_ops_longer_than_the_step_wall_time_are_not_damage(home, tmp_path):
    """Kernels on concurrent streams: device time per step above the step's wall time is real."""
    run = previous_run(home, step_wall_s=[0.5e-3, 0.5e-3])  # 2 ms of device time per 0.5 ms step
    result = invoke("report", run, "-o", tmp_path / "r.html")
    assert result.exit_code == 0, result.stderr
    assert (tmp_path / "r.html").is_file()


def test_real_runs_load(tmp_path):
    with tarfile.open(GPU_RUNS) as tar:
        tar.extractall(tmp_path, filter="data")
    runs = sorted(p.parent for p in tmp_path.rglob("ops.csv"))
    assert len(runs) >= 10
    for run in runs:
        assert not load_run(run).ops.empty
