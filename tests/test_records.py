"""Run-directory records: round trips, and readers that fail loudly instead of guessing."""
from __future__ import annotations

import json

import pytest
from run_factory import recommendations_doc

from kernel_advisor.errors import UserInputError
from kernel_advisor.records.base import strict
from kernel_advisor.records.recommendations import FILE, SCHEMA_VERSION, RecommendationsRecord


def test_round_trip_keeps_every_field():
    doc = recommendations_doc()
    record = RecommendationsRecord.from_json(doc)
    again = record.to_json()
    assert RecommendationsRecord.from_json(again) == record
    top = record.recommendations[0]
    assert (top.action, top.measured.verdict, top.measured.speedup["value"]) == ("kernel:triton-softmax", "faster", 1.21)
    assert again["total_estimated_gain_per_step_s"] == doc["total_estimated_gain_per_step_s"]  # kept in `rest`


@pytest.mark.parametrize("version", [1, 2, 4, None, "3"])
def test_other_schema_versions_are_refused(version):
    doc = dict(recommendations_doc(), schema_version=version)
    with pytest.raises(UserInputError, match=f"schema_version {version!r}; this kernel_advisor reads version 3"):
        RecommendationsRecord.from_json(doc)


def test_missing_top_level_key_is_named():
    doc = recommendations_doc()
    del doc["plan"]
    with pytest.raises(UserInputError, match="lacks plan"):
        RecommendationsRecord.from_json(doc)


def test_missing_entry_key_names_the_entry():
    doc = recommendations_doc()
    del doc["recommendations"][1]["action"]
    with pytest.raises(UserInputError, match=r"recommendation 1\) lacks action"):
        RecommendationsRecord.from_json(doc)


def test_read_from_a_run_directory(tmp_path):
    assert RecommendationsRecord.read(tmp_path) is None
    (tmp_path / FILE).write_text(json.dumps(recommendations_doc()))
    assert RecommendationsRecord.read(tmp_path).recommendations[1].measured.status == "not-applied"
    (tmp_path / FILE).write_text("{oops")
    with pytest.raises(UserInputError, match="not valid JSON"):
        RecommendationsRecord.read(tmp_path)


def test_strict_json_has_no_nan():
    assert strict({"a": float("nan"), "b": (1.0, float("inf")), "c": 2}) == {"a": None, "b": [1.0, None], "c": 2}
    assert SCHEMA_VERSION == 3
