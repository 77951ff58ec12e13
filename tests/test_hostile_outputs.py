"""Outputs never replace a file we did not write: run records, the model file, devices,
directories, links, or another existing file (unless --force). Each refusal is one line,
exit 1, nothing on stdout, and the file keeps its bytes and mtime."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from battery.checks import BATTERY, previous_run
from battery.hostile import fails_cleanly, invoke, snapshot
from battery.hostile import home  # noqa: F401 - fixture


@pytest.fixture
def run(home):
    return previous_run(home)


@pytest.mark.parametrize("command", ["report", "roofline"])
@pytest.mark.parametrize("record", ["run.json", "ops.csv", "sequence.csv"])
def test_a_run_record_is_never_an_output(run, command, record):
    before = snapshot(run / record)
    says = ("run directory's own records",) if command == "report" else (".png or .svg",)  # roofline: suffix first
    fails_cleanly(invoke(command, run, "-o", run / record, "--force"), 1, says)
    assert snapshot(run / record) == before


@pytest.mark.parametrize("command, name", [("report", "model.html"), ("roofline", "model.png")])
def test_the_model_file_is_never_an_output(tmp_path, monkeypatch, command, name):
    """A run's model file, even one named like the output, is refused, --force or not."""
    monkeypatch.setenv("ADVISOR_HOME", str(tmp_path / ".advisor"))
    monkeypatch.chdir(tmp_path)
    model = tmp_path / name
    shutil.copy(BATTERY / "softmax_model.py", model)
    run = previous_run(tmp_path / ".advisor", model={"file": str(model), "sha256": None, "entry": None})
    before = snapshot(model)
    fails_cleanly(invoke(command, run, "-o", model, "--force"), 1, ("is the model file",))
    assert snapshot(model) == before


def test_an_existing_python_file_needs_force(run, tmp_path):
    model = tmp_path / "model.py"
    shutil.copy(BATTERY / "softmax_model.py", model)
    before = snapshot(model)
    fails_cleanly(invoke("report", run, "-o", model), 1, ("already exists", "--force"))
    assert snapshot(model) == before


def test_force_replaces_a_file_that_is_not_a_report(run, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    result = invoke("report", run, "-o", notes, "--force")
    assert result.exit_code == 0, result.stderr
    assert notes.read_text().startswith("<!DOCTYPE html>") or "<html" in notes.read_text()[:500]


def test_an_older_report_is_replaced_without_force(run, tmp_path):
    old = tmp_path / "old.html"
    old.write_text("<html>old</html>")
    assert invoke("report", run, "-o", old).exit_code == 0
    assert "old</html>" not in old.read_text()


@pytest.mark.parametrize("kind", ["directory", "symlink", "device", "fifo"])
def test_what_is_not_a_regular_file_is_never_replaced(run, tmp_path, kind):
    target = tmp_path / "out.html"
    if kind == "directory":
        target.mkdir()
    elif kind == "symlink":
        (tmp_path / "real.html").write_text("<html>mine</html>")
        target.symlink_to(tmp_path / "real.html")
    elif kind == "device":
        target = Path("/dev/null")
    else:
        os.mkfifo(target)
    mode = os.lstat(target).st_mode
    fails_cleanly(invoke("report", run, "-o", target, "--force"), 1, (str(target),))
    assert os.lstat(target).st_mode == mode


def test_roofline_over_an_existing_text_file(run, tmp_path):
    notes = tmp_path / "chart.svg.txt"
    notes.write_text("mine\n")
    fails_cleanly(invoke("roofline", run, "-o", notes), 1)
    assert notes.read_text() == "mine\n"


@pytest.mark.parametrize("out", [".", "{model}"], ids=["dot", "model-file"])
def test_profile_out_is_checked_before_the_model_runs(run, tmp_path, out):
    model = tmp_path / "slow.py"
    model.write_text("raise SystemExit('the model must not even be imported')\n")
    out = str(model) if out == "{model}" else out
    before = snapshot(model)
    fails_cleanly(invoke("profile", model, "--device", "cpu", "--out", out), 1, ("already exists",))
    assert snapshot(model) == before


def test_import_out_over_a_run(run, tmp_path):
    before = snapshot(run / "run.json")
    fails_cleanly(invoke("import", BATTERY / "trace_small.json.gz", "--out", run), 1, ("already exists",))
    assert snapshot(run / "run.json") == before
