"""Column names carry their scope (records/columns.py): a run of the previous schema still loads,
under today's names, by the rename table of the schema it declares; a newer schema is refused in
one line; a rule naming an old column is told the new name."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_factory import gpt_like_ops, write_run

from kernel_advisor.collect.rundir import load_run
from kernel_advisor.errors import UserInputError
from kernel_advisor.records import columns
from kernel_advisor.records.run import SCHEMA_VERSION
from kernel_advisor.recommend.conditions import ConditionValueError, parse_condition
from kernel_advisor.recommend.messages import TemplateError, validate_template
from kernel_advisor.recommend.schema import load_rule_file


def _as_schema_1(run: Path) -> None:
    """Rewrite `run` as the previous schema wrote it: schema_version 1 and the old names."""
    doc = json.loads((run / "run.json").read_text())
    doc["schema_version"] = 1
    doc["coverage"]["unmodelled"] = [{"name": "mylib::fused_rope", "device_time_s": 1e-4}]
    (run / "run.json").write_text(json.dumps(doc))
    for name, place in (("ops.csv", columns.OPS), ("sequence.csv", columns.SEQUENCE)):
        old = {new: old for old, new in columns.RENAMED_SINCE[1][place].items()}
        lines = (run / name).read_text().splitlines(keepends=True)
        lines[0] = ",".join(old.get(c, c) for c in lines[0].rstrip("\n").split(",")) + "\n"
        (run / name).write_text("".join(lines).replace('""time_total_s""', '""time_s""'))


def test_the_previous_schema_loads_under_todays_names(tmp_path):
    fresh = load_run(write_run(tmp_path / "new", gpt_like_ops()))
    old_dir = write_run(tmp_path / "old", gpt_like_ops())
    _as_schema_1(old_dir)
    assert "device_time_s" in (old_dir / "ops.csv").read_text().splitlines()[0].split(",")
    old = load_run(old_dir)
    assert list(old.ops.columns) == list(fresh.ops.columns)
    assert list(old.sequence.columns) == list(fresh.sequence.columns)
    assert old.ops["device_time_total_s"].tolist() == fresh.ops["device_time_total_s"].tolist()
    assert old.ops["flops_per_call"].equals(fresh.ops["flops_per_call"])
    assert old.meta["schema_version"] == SCHEMA_VERSION
    assert old.meta["coverage"]["unmodelled"] == [{"name": "mylib::fused_rope", "device_time_total_s": 1e-4}]


def test_the_previous_schema_renames_kernel_lists(tmp_path):
    ops = gpt_like_ops()
    ops[0] = type(ops[0])(**{**ops[0].__dict__, "kernels": [{"name": "sm90_gemm", "count": 4, "time_total_s": 2e-3,
                                                             "max_blocks": 264}]})
    run = write_run(tmp_path / "old", ops)
    _as_schema_1(run)
    assert '""time_s""' in (run / "ops.csv").read_text()
    linear = load_run(run).ops.set_index("name").loc["aten::linear"]
    assert linear["kernels"] == [{"name": "sm90_gemm", "count": 4, "time_total_s": 2e-3, "max_blocks": 264}]


def test_renames_go_by_the_declared_version_not_by_the_names_found(tmp_path):
    # A run declaring today's schema with an old column is damaged, not migrated.
    run = write_run(tmp_path / "run", gpt_like_ops())
    text = (run / "ops.csv").read_text()
    (run / "ops.csv").write_text(text.replace("device_time_total_s", "device_time_s", 1))
    with pytest.raises(UserInputError, match="lacks the column device_time_total_s"):
        load_run(run)


def test_a_newer_schema_is_refused_in_one_line(tmp_path):
    run = write_run(tmp_path / "run", gpt_like_ops())
    doc = json.loads((run / "run.json").read_text())
    (run / "run.json").write_text(json.dumps({**doc, "schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(UserInputError) as e:
        load_run(run)
    line = e.value.one_line()
    assert "\n" not in line
    assert line.startswith(f"{run / 'run.json'} was written with run schema {SCHEMA_VERSION + 1}, newer than "
                           f"this advisor reads (up to {SCHEMA_VERSION})")
    assert "upgrade kernel_advisor" in line


def test_renames_chain_and_name_every_old_ops_column():
    assert columns.renames(SCHEMA_VERSION, columns.OPS) == {}
    old_ops = columns.renames(1, columns.OPS)
    assert old_ops["mean_device_time_s"] == "device_time_per_call_s"
    assert all(new in columns.NUMERIC_COLUMNS for new in old_ops.values())
    assert columns.renamed_ops_column("headroom_s") == "headroom_total_s"
    assert columns.renamed_ops_column("share_pct") is None


@pytest.mark.parametrize("old,new", [("mean_kernel_s", "kernel_time_per_launch_s"),
                                     ("run_mean_kernel_s", "run_kernel_time_per_launch_s")])
def test_a_condition_naming_an_old_column_is_told_the_new_name(old, new):
    scope = "run" if old.startswith("run_") else "op"
    with pytest.raises(ConditionValueError) as e:
        parse_condition(old, {"max": 1e-5}, scope)
    assert str(e.value) == f"'{old}' is now '{new}'"
    parse_condition(new, {"max": 1e-5}, scope)


def test_a_condition_naming_an_old_column_that_is_no_condition_says_both():
    with pytest.raises(ConditionValueError, match="'device_time_s' is now 'device_time_total_s', which is an "
                                                  "ops.csv column, not a condition"):
        parse_condition("device_time_s", {"min": 1e-3}, "op")


def test_a_message_naming_an_old_field_is_told_the_new_name():
    with pytest.raises(TemplateError, match=r"'\{mean_kernel_us\}' is now '\{kernel_time_per_launch_us\}'"):
        validate_template("{name} averages {mean_kernel_us:.1f} us", "op")


def test_a_user_rule_file_with_an_old_column_fails_naming_the_new_one(tmp_path):
    rules = tmp_path / "mine.yaml"
    rules.write_text("version: 2\nrules:\n  - id: tiny-kernels\n    title: Tiny kernels\n    tier: library\n"
                     "    scope: op\n    conditions:\n      mean_kernel_s: {max: 1.0e-5}\n"
                     "    message: small kernels\n    gain: {model: none}\n    action: none\n"
                     "    action_reason: a test rule\n")
    with pytest.raises(UserInputError) as e:
        load_rule_file(rules)
    line = e.value.one_line()
    assert f"{rules}:8" in line and "'mean_kernel_s' is now 'kernel_time_per_launch_s'" in line
