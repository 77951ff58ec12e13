"""Run directories: atomic, `latest` only after completion, loading checks schema and files."""
import json

import pandas as pd
import pytest

from kernel_advisor.collect.rundir import (SCHEMA_VERSION, RunWriter, load_run, resolve_run, set_latest,
                                           write_json_atomic, write_table)
from kernel_advisor.errors import UserInputError
from kernel_advisor.records.columns import OPS_REQUIRED, SEQUENCE_REQUIRED


def complete_run(path):
    """A minimal run holding every column of the contract (collect columns only, not analysed)."""
    ops = {c: [0] for c in OPS_REQUIRED} | {"name": ["aten::mm"], "kind": ["op"], "region": [""],
                                            "input_shapes": [[[2, 3], [3, 4]]], "input_dtypes": [["float32"] * 2],
                                            "input_strides": [[]], "concrete_inputs": [[]], "kernels": ["[]"]}
    sequence = {c: [0] for c in SEQUENCE_REQUIRED} | {"name": ["aten::mm"], "region": [""],
                                                     "input_shapes": [[[2, 3], [3, 4]]],
                                                     "input_dtypes": [["float32"] * 2]}
    with RunWriter(path) as tmp:
        write_table(tmp / "ops.csv", pd.DataFrame(ops))
        write_table(tmp / "sequence.csv", pd.DataFrame(sequence))
        write_json_atomic(tmp / "run.json", {"schema_version": SCHEMA_VERSION})
    return path


def test_complete_run_becomes_latest_and_round_trips(advisor_home):
    path = complete_run(advisor_home / "runs" / "a")
    assert resolve_run() == advisor_home / "runs" / "a"
    run = load_run(resolve_run())
    assert run.ops.loc[0, "input_shapes"] == [[2, 3], [3, 4]]  # JSON columns decoded
    assert run.ops.loc[0, "kernels"] == []
    assert not [p for p in path.parent.iterdir() if "partial" in p.name]


def test_interrupted_run_leaves_nothing_and_latest_unchanged(advisor_home):
    complete_run(advisor_home / "runs" / "good")
    with pytest.raises(KeyboardInterrupt):
        with RunWriter(advisor_home / "runs" / "bad") as tmp:
            (tmp / "ops.csv").write_text("half")
            raise KeyboardInterrupt
    assert sorted(p.name for p in (advisor_home / "runs").iterdir()) == ["good", "latest"]
    assert resolve_run().name == "good"


def test_no_run_yet(advisor_home):
    with pytest.raises(UserInputError, match="no run yet"):
        resolve_run()


def test_older_schema_is_refused(advisor_home):
    path = complete_run(advisor_home / "runs" / "old")
    (path / "run.json").write_text(json.dumps({"schema_version": 0}))
    with pytest.raises(UserInputError, match="schema 0"):
        load_run(path)


@pytest.mark.parametrize("damage", ["missing_ops", "bad_json", "not_object"])
def test_damaged_runs_are_refused(advisor_home, damage):
    path = complete_run(advisor_home / "runs" / "x")
    if damage == "missing_ops":
        (path / "ops.csv").unlink()
    elif damage == "bad_json":
        (path / "run.json").write_text('{"schema_version": 1')
    else:
        (path / "run.json").write_text("[1, 2]")
    with pytest.raises(UserInputError):
        load_run(path)


def test_out_dir_that_is_not_empty_is_refused(advisor_home, tmp_path):
    target = tmp_path / "out"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    with pytest.raises(UserInputError, match="not empty"):
        complete_run(target)
    assert (target / "keep.txt").read_text() == "mine"


def test_latest_outside_the_runs_root_is_absolute(advisor_home, tmp_path):
    path = complete_run(tmp_path / "elsewhere")
    set_latest(path)
    assert resolve_run() == path.resolve()
