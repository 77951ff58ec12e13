"""try_kernel.json's record (records/try_kernel.py): trykernel/results.py writes through it,
load_try_kernel reads through it, and the reader refuses what it cannot trust."""
from __future__ import annotations

import json
import math

import pytest
from run_factory import try_kernel_doc

from kernel_advisor.records.try_kernel import load_try_kernel
from kernel_advisor.errors import UserInputError
from kernel_advisor.records.base import RecordError
from kernel_advisor.records.try_kernel import FILE, SCHEMA_VERSION, VARIANT_KEYS, TryKernelRecord
from kernel_advisor.trykernel.results import (GateSummary, OpTiming, Prediction, TryReport, VariantResult,
                                              report_json)
from kernel_advisor.collect.loop_timing import Estimate


def variant(name: str, kind: str, status: str, **over) -> VariantResult:
    fields = dict(name=name, kind=kind, kernel_ids=(), targets=("aten::_softmax",), status=status, reason="",
                  calls=4, fallback_calls=0, fallback_reasons=(), gate=None, timing_label="CPU timing",
                  step_s=Estimate(2e-3, 1.9e-3, 2.1e-3), speedup=None, verdict="", op=None,
                  peak_memory_bytes=None, prediction=None, suspect="", compile_s=None)
    return VariantResult(**{**fields, **over})


def report() -> TryReport:
    gate = GateSummary("passed", "", 3, 1, 1e-3, 2e-3, math.nan, 2.5e-3, "out")
    return TryReport(model="m.py", device="cpu", mode="inference", dtype="float32", timing="CPU timing",
                     float64_reference="", notes=("timed on CPU",), variants=(
                         variant("eager", "eager", "baseline"),
                         variant("k", "candidate", "passed", kernel_ids=("triton-softmax",), gate=gate,
                                 speedup=Estimate(1.2, 1.1, math.inf), verdict="faster",
                                 op=OpTiming(("aten::_softmax",), 1e-4, 3e-4, 3.0),
                                 prediction=Prediction(0.1, "ops.csv share 30.0%", 0.09),
                                 member_calls=(("triton-softmax", 4),)),
                         variant("torch.compile", "compile", "passed", compile_s=1.5, graph_breaks=0)))


def test_what_try_kernel_writes_round_trips():
    doc = report_json(report(), {"created": "2026-11-25T00:00:00Z", "run": "/runs/a", "args": {"reps": 3}})
    assert list(doc)[:4] == ["schema_version", "created", "run", "args"] and doc["schema_version"] == SCHEMA_VERSION
    json.dumps(doc, allow_nan=False)  # NaN and inf became null
    assert doc["variants"][1]["gate"]["ref_rel_err"] is None and doc["variants"][1]["speedup"]["high"] is None
    record = TryKernelRecord.from_json(json.loads(json.dumps(doc)))
    assert record.to_json() == doc
    assert record.rest["run"] == "/runs/a" and record.variants[1]["member_calls"] == [["triton-softmax", 4]]
    assert TryKernelRecord.from_json(record.to_json()) == record


def test_the_report_reads_it_through_the_record(tmp_path):
    doc = report_json(report(), {"created": "2026-11-25T00:00:00Z", "run": None, "args": {}})
    (tmp_path / FILE).write_text(json.dumps(doc))
    results = load_try_kernel(tmp_path)
    assert [v["name"] for v in results.variants] == ["eager", "k", "torch.compile"]
    assert results.summary == {k: v for k, v in doc.items() if k != "variants"}
    assert load_try_kernel(tmp_path / "nothing-here") is None


def test_an_older_file_without_the_newer_keys_still_loads(tmp_path):
    # run_factory's document: no created/run/args, variants without member_calls, graph_breaks, ...
    doc = try_kernel_doc()
    (tmp_path / FILE).write_text(json.dumps(doc))
    record = TryKernelRecord.read(tmp_path)
    assert record.to_json() == doc and len(record.variants) == 3 and record.rest == {}


@pytest.mark.parametrize("version", [0, 2, None, "1"])
def test_another_schema_version_is_refused_in_one_line_naming_the_file(tmp_path, version):
    (tmp_path / FILE).write_text(json.dumps(dict(try_kernel_doc(), schema_version=version)))
    with pytest.raises(RecordError) as e:
        load_try_kernel(tmp_path)
    assert isinstance(e.value, UserInputError)
    line = e.value.one_line()
    assert "\n" not in line and line.startswith(f"{tmp_path / FILE} has schema_version {version!r}")
    assert "advisor try-kernel" in line


def test_a_list_is_not_guessed_at(tmp_path):
    (tmp_path / FILE).write_text(json.dumps(try_kernel_doc()["variants"]))
    with pytest.raises(RecordError, match="is not a JSON object"):
        load_try_kernel(tmp_path)


@pytest.mark.parametrize("key", ["model", "timing", "variants", "notes"])
def test_a_missing_key_is_named(key):
    doc = try_kernel_doc()
    del doc[key]
    with pytest.raises(RecordError, match=f"lacks {key}"):
        TryKernelRecord.from_json(doc)


@pytest.mark.parametrize("key", VARIANT_KEYS)
def test_a_variant_missing_a_key_is_named(key):
    doc = try_kernel_doc()
    del doc["variants"][2][key]
    with pytest.raises(RecordError, match=rf"\(variant 2\) lacks {key}"):
        TryKernelRecord.from_json(doc)


@pytest.mark.parametrize("where,key,value", [
    (None, "model", 3), (None, "variants", {}), (None, "notes", "one note"), (None, "notes", [1]),
    (1, "calls", "4"), (1, "calls", True), (1, "step_s", 1.9e-3), (1, "status", None), (1, "targets", "aten::mm"),
    (1, "compile_s", "1 s"), (1, "peak_memory_bytes", 1.5),
])
def test_a_key_of_the_wrong_type_is_refused(where, key, value):
    doc = try_kernel_doc()
    (doc if where is None else doc["variants"][where])[key] = value
    with pytest.raises(RecordError) as e:
        TryKernelRecord.from_json(doc, "run/try_kernel.json")
    where_text = "run/try_kernel.json" if where is None else f"run/try_kernel.json (variant {where})"
    assert e.value.problem == f"{where_text} is damaged: {key} has the wrong type"


def test_a_variant_that_is_not_an_object_is_refused():
    doc = try_kernel_doc()
    doc["variants"][0] = "eager"
    with pytest.raises(RecordError, match=r"variants\[0\] has the wrong type"):
        TryKernelRecord.from_json(doc)
