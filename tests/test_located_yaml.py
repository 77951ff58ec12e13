"""The one YAML loader (kernel_advisor/located_yaml.py) for files of a fixed shape: load_checked
reads what the devices table and the verdict thresholds hold, and names file and line."""
from __future__ import annotations

import pytest
from test_ceilings import GOOD_ENTRY, _write

from kernel_advisor.analyze import ceilings as C
from kernel_advisor.analyze import roofline as R
from kernel_advisor.errors import UserInputError
from kernel_advisor.located_yaml import Located, fail, load_checked

SCHEMA = C._DEVICES_SCHEMA  # the devices table's shape, as analyze/ceilings.py declares it


def test_the_shipped_files_load_as_yaml_safe_load_reads_them():
    import yaml

    for path, schema in ((C.DEVICES_FILE, SCHEMA), (R.THRESHOLDS_FILE, R._THRESHOLDS_SCHEMA)):
        data, root = load_checked(path, schema)
        assert data == yaml.safe_load(path.read_text()) and isinstance(root, Located)
    assert R.load_thresholds().limiter_frac > 0


def test_lines_of_later_checks_come_from_the_tree(tmp_path):
    data, root = load_checked(_write(tmp_path, GOOD_ENTRY), SCHEMA)
    entry = root.value["devices"].value[0]
    assert data["devices"][0]["id"] == "x" and entry.line == 3 and entry.value["l2_mib"].line == 10
    with pytest.raises(UserInputError) as e:
        fail("devices.yaml", entry, "duplicate device id 'x'", "ids must be unique")
    assert e.value.one_line() == "devices.yaml:3: duplicate device id 'x' — ids must be unique"


# The devices table's own error cases (tests/test_ceilings.py): the same lines.
@pytest.mark.parametrize("old,new,line,message", [
    ("    l2_mib: 1\n", "    l2_mib: 1\n    colour: red\n", 11, "unknown key 'colour' in file.devices[0]"),
    ("peak_tflops: {fp32: 10}", "peak_tflops: {fp32: 10, int8: 5}", 8, "unknown key 'int8'"),
    ("memory_gb_per_s: 100", "memory_gb_per_s: fast", 9, "must be pos, got str 'fast'"),
    ("memory_gb_per_s: 100", "memory_gb_per_s: 1e11", 9, "write 1.0e12"),
    ("memory_gb_per_s: 100", "memory_gb_per_s: -5", 9, "positive finite"),
    ("memory_gb_per_s: 100", "memory_gb_per_s: .inf", 9, "positive finite"),
    ("memory_gb_per_s: 100", "memory_gb_per_s: true", 9, "must be pos, got bool True"),
    ("memory_gb_per_s: 100", "memory_gb_per_s: [1]", 9, "must be pos, got collection"),
    ("sm_count: 4", "sm_count: null", None, None),  # int? takes null
    ("sm_count: 4", "sm_count: 4.5", 11, "must be int, got float 4.5"),
    ("    source: test\n", "", 3, "lacks required key(s) source"),
    ("    sm_count: 4\n", "    sm_count: 4\n    sm_count: 5\n", 12, "key 'sm_count' given twice (first on line 11)"),
    ("match: ['^X$']", "match: '^X$'", 6, "file.devices[0].match must be a list"),
    ("    name: X\n", "    name: !!python/object/apply:os.system ['true']\n", 4, "python/object/apply"),
    ("    peak_tflops: {fp32: 10}\n", "    peak_tflops: !!python/dict {fp32: 10}\n", 8, "is not allowed"),
    ("version: 1", "version: 2", 1, "version 2 is not supported"),
    ("pcie_gb_per_s: 64\n", "pcie_gb_per_s: 64\n  bad: [\n", 14, "invalid YAML"),
])
def test_errors_name_file_and_line(tmp_path, old, new, line, message):
    assert old in GOOD_ENTRY
    path = _write(tmp_path, GOOD_ENTRY.replace(old, new))
    if line is None:
        assert load_checked(path, SCHEMA)[0]["devices"][0]["sm_count"] is None
        return
    with pytest.raises(UserInputError) as e:
        load_checked(path, SCHEMA)
    assert e.value.problem.startswith(f"{path}:{line}:") and message in e.value.one_line()


@pytest.mark.parametrize("text,words", [("", "the file is empty"), ("- 1\n", "file must be a mapping")])
def test_not_a_mapping(tmp_path, text, words):
    path = tmp_path / "t.yaml"
    path.write_text(text)
    with pytest.raises(UserInputError, match=words):
        load_checked(path, {"version": "int"})


def test_unreadable_files(tmp_path):
    with pytest.raises(UserInputError, match="cannot read"):
        load_checked(tmp_path / "missing.yaml", {"version": "int"})
    (tmp_path / "latin1.yaml").write_bytes("version: 1\nname: caf\xe9\n".encode("latin-1"))
    with pytest.raises(UserInputError, match="not UTF-8"):
        load_checked(tmp_path / "latin1.yaml", {"version": "int", "name": "str"})


def test_star_keys_take_any_name_and_check_each_value(tmp_path):
    schema = {"version": "int", "devices": {"*": {"*": {"scale": "pos", "n": "int"}}}}
    path = tmp_path / "fit.yaml"
    path.write_text("version: 2\ndevices:\n  cuda:\n    compile: {scale: 1.5, n: 3}\n")
    assert load_checked(path, schema, 2)[0]["devices"]["cuda"]["compile"] == {"scale": 1.5, "n": 3}
    path.write_text("version: 2\ndevices:\n  cuda:\n    compile: {scale: 0, n: 3}\n")
    with pytest.raises(UserInputError, match=r"fit.yaml:4: file.devices.cuda.compile.scale must be a positive"):
        load_checked(path, schema, 2)


def test_the_gain_calibration_file_is_read_by_the_one_loader(tmp_path):
    from kernel_advisor.recommend.gain_fit import load_calibration

    path = tmp_path / "gain.yaml"
    path.write_text("version: 2\nfitted_by: f\nsource: s\ngpu: g\ncommit: c\ndate: d\n"
                    "devices:\n  cuda:\n    compile: {scale: 1.2, n: four}\n")
    with pytest.raises(UserInputError, match=r"gain.yaml:9: .*n must be int, got str 'four'"):
        load_calibration(path)
