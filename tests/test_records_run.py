"""run.json's record (records/run.py): round trips, the writers' documents, and a reader that
refuses another schema or a wrong type in one line naming the file, yet loads older runs."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_factory import gpt_like_ops, run_meta, write_run

from kernel_advisor.collect.run_meta import run_json
from kernel_advisor.collect.rundir import load_run
from kernel_advisor.errors import UserInputError
from kernel_advisor.records.base import RecordError
from kernel_advisor.records.run import KEY_TYPES, SCHEMA_VERSION, WRITTEN, RunRecord

DATA = Path(__file__).parent / "data"


def written_meta() -> dict:
    """run.json as collect/run_meta.py writes it for a profile, analysed (ceilings, coverage)."""
    meta = run_meta(2, [0.005, 0.004], {"source": "datasheet", "bandwidth_bytes_per_s": 4.8e12}, 8e-3)
    meta.update(trace_step_wall_s=[0.0051, 0.0041], step_device_time_s=[4e-3, 4e-3], nonfinite_outputs=[],
                step_markers="advisor::step#N", peak_memory_kind="cuda_max_allocated",
                step_s={"value_s": 0.0045, "low_s": 0.004, "high_s": 0.005, "source": "unprofiled", "steps": 2},
                steady_state=None, profiler_overhead=None)
    return meta


def one_line(e: pytest.ExceptionInfo) -> str:
    line = e.value.one_line()
    assert "\n" not in line
    return line


def test_round_trip_keeps_every_key():
    meta = written_meta()
    doc = run_json(meta)
    assert list(doc)[0] == "schema_version" and doc["schema_version"] == SCHEMA_VERSION
    assert doc == {**meta, "schema_version": SCHEMA_VERSION}
    record = RunRecord.from_json(json.loads(json.dumps(doc)))
    assert record.to_json() == doc and record.meta() == doc
    assert RunRecord.from_json(record.to_json()) == record


def test_the_writer_leaves_no_nan_and_no_tuples():
    meta = dict(written_meta(), profiler_overhead_ratio=float("nan"), step_wall_s=(0.005, 0.004))
    doc = run_json(meta)
    assert doc["profiler_overhead_ratio"] is None and doc["step_wall_s"] == [0.005, 0.004]
    json.dumps(doc, allow_nan=False)


@pytest.mark.parametrize("key", WRITTEN)
def test_a_writer_that_leaves_out_a_key_every_writer_sets_fails(key):
    meta = written_meta()
    del meta[key]
    with pytest.raises(ValueError, match=f"without {key}"):
        run_json(meta)


def test_a_writer_of_a_wrong_type_fails():
    with pytest.raises(ValueError, match="steps"):
        run_json(dict(written_meta(), steps=2.0))


def test_import_writes_the_records_document(tmp_path, monkeypatch):
    from kernel_advisor.pipeline import import_to_run

    monkeypatch.setenv("ADVISOR_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ADVISOR_CACHE_DIR", str(tmp_path / "cache"))
    out, meta = import_to_run(DATA / "cuda_gpt_inference.json.gz",
                              {"mode": "inference", "source_trace": "t", "steps": None}, tmp_path / "run")
    doc = json.loads((out / "run.json").read_text())
    assert doc == run_json(meta) and set(WRITTEN) <= set(doc)
    assert RunRecord.read(out / "run.json").to_json() == doc
    assert load_run(out).meta == doc


@pytest.mark.parametrize("version", [0, None, "1", True, 1.0, 2.0])
def test_another_schema_version_is_refused_in_one_line_naming_the_file(tmp_path, version):
    path = write_run(tmp_path / "run", gpt_like_ops()) / "run.json"
    doc = json.loads(path.read_text())
    doc["schema_version"] = version
    path.write_text(json.dumps(doc))
    with pytest.raises(RecordError) as e:
        load_run(path.parent)
    assert isinstance(e.value, UserInputError)
    line = one_line(e)
    assert line.startswith(f"{path} was written with run schema {version!r}; this advisor reads run schemas 1, 2")
    assert "profile the model again" in line


def test_a_document_without_a_schema_version_is_refused():
    with pytest.raises(RecordError, match="run schema None"):
        RunRecord.from_json({k: v for k, v in run_json(written_meta()).items() if k != "schema_version"})


@pytest.mark.parametrize("key,value", [
    ("steps", "two"), ("steps", True), ("steps", 2.0), ("args", []), ("device", "cuda"),
    ("step_wall_s", [0.1, "x"]), ("step_wall_s", [0.1, True]), ("unprofiled_step_wall_s", {}),
    ("total_device_time_s", "1"), ("device_busy_s", None), ("step_s", 0.004), ("shapes_recorded", 1),
    ("peak_memory_bytes", 1.5), ("ceilings", None), ("coverage", []), ("distributed", "2 ranks"),
    ("step_markers", 3), ("profiler_overhead_ratio", "1.03"), ("trace_step_wall_s", [None]),
])
def test_a_key_of_the_wrong_type_is_refused_in_one_line_naming_the_file(tmp_path, key, value):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(dict(run_json(written_meta()), **{key: value})))
    with pytest.raises(RecordError) as e:
        RunRecord.read(path)
    assert one_line(e) == f"{path} is damaged: {key} has the wrong type — profile again to write a fresh run"


def test_every_typed_key_is_checked():
    # a key KEY_TYPES names but no test damages would be a check nobody knows works
    for key, types in KEY_TYPES.items():
        wrong = "text" if str not in types else 12345
        with pytest.raises(RecordError, match=f"{key} has the wrong type"):
            RunRecord.from_json(dict(run_json(written_meta()), **{key: wrong}))


def test_nullable_keys_take_null():
    meta = dict(written_meta(), step_s=None, step_markers=None, profiler_overhead_ratio=None, peak_memory_bytes=None)
    assert RunRecord.from_json(run_json(meta)).values["step_s"] is None


@pytest.mark.parametrize("text,words", [('{"schema_version": 1', "is corrupted"), ("[1, 2]", "is not a run.json object"),
                                        ("[" * 100_000 + "]" * 100_000, "nested too deeply")])
def test_damaged_json_is_refused_naming_the_file(tmp_path, text, words):
    path = tmp_path / "run.json"
    path.write_text(text)
    with pytest.raises(RecordError) as e:
        RunRecord.read(path)
    assert one_line(e).startswith(str(path)) and words in one_line(e)


def test_an_older_run_without_the_optional_keys_still_loads(tmp_path):
    # As the first schema-1 writer left it: no step_s, steady_state, profiler_overhead,
    # step_markers, shapes_recorded, ceilings, coverage (nor distributed).
    meta = {k: v for k, v in written_meta().items()
            if k not in ("step_s", "steady_state", "profiler_overhead", "step_markers", "ceilings", "coverage")}
    assert not set(meta) - set(WRITTEN) - {"schema_version", "peak_memory_kind", "tool_version"}
    run = write_run(tmp_path / "old", gpt_like_ops(), analyzed=False)
    (run / "run.json").write_text(json.dumps(meta))
    loaded = load_run(run)
    assert loaded.meta == meta and "step_s" not in loaded.meta
    # readers fall back: the step time is worked out of the step times
    from kernel_advisor.collect.step_time import step_time_of
    assert step_time_of(loaded.meta).value_s == pytest.approx(0.0045 * 0.97)


def test_a_run_with_only_some_keys_loads_and_unknown_keys_are_kept():
    doc = {"schema_version": 1, "model": {"file": "m.py"}, "added_by_a_newer_minor": {"x": 1}}
    record = RunRecord.from_json(doc)
    assert record.to_json() == doc
