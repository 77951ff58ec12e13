"""The Python API's objects without a profile: grouped recommendations, a short repr, a try that
applied nothing saying so, Triton interpreted on a CPU."""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import types

import pytest

import kernel_advisor as ka
from kernel_advisor.api import FRAME_COLUMNS, Recommendations
from kernel_advisor.pipeline import said_when_nothing_applied, use_triton_interpreter
from kernel_advisor.records.recommendations import RecommendationEntry

from battery.checks import previous_run


def _entry(rank, rule_id, subject, gain, action="compile"):
    return RecommendationEntry(rank=rank, rule_id=rule_id, tier="compile", title=rule_id, scope="op",
                               subject=subject, label=subject, row_ids=(), message="",
                               estimated_gain_per_step_s=gain, estimated_gain_frac=gain / 0.1,
                               row_gain_per_step_s={}, gain_model="", gain_basis="", thresholds=(), evidence={},
                               kernel_id=None, command=None, references=(), caveats=(), source="", action=action,
                               action_reason="")


@pytest.mark.parametrize("subjects", [1, 2, 6])
def test_to_frame_has_one_row_per_finding(subjects):
    entries = [_entry(1, "fuse", f"row:{i}", 0.001 * (i + 1)) for i in range(subjects)] + [_entry(2, "sdpa", "row:9", 0.002)]
    findings = [{"rule_id": "fuse", "estimated_gain_per_step_s": 0.004, "estimated_gain_frac": 0.04,
                 "within_noise": False}, {"rule_id": "sdpa", "estimated_gain_per_step_s": 0.002,
                                          "estimated_gain_frac": 0.02, "within_noise": True}]
    recs = Recommendations(entries, findings)
    assert list(recs) == entries and len(recs) == subjects + 1  # iterates as the flat list did
    frame = recs.to_frame()
    assert tuple(frame.columns) == FRAME_COLUMNS
    assert list(frame["rank"]) == [1, 2] and list(frame["subjects"]) == [subjects, 1]
    assert frame.loc[0, "estimated_gain_per_step_s"] == 0.004  # the finding's union, not a sum of entries
    assert frame.loc[0, "where"] == ("row:0" if subjects == 1 else f"row:0 (+{subjects - 1} more)")
    assert list(frame["within_noise"]) == [False, True]


def test_an_empty_recommendation_list_is_an_empty_frame():
    frame = Recommendations().to_frame()
    assert frame.empty and tuple(frame.columns) == FRAME_COLUMNS


def test_repr_names_path_model_device_and_step(tmp_path):
    run = ka.load(previous_run(tmp_path, "r"))
    text = repr(run)
    assert text.startswith("Run(path=") and "model=" in text and "device=" in text and "step=" in text
    assert len(text) < 300 and json.dumps(run.meta)[:200] not in text


@dataclasses.dataclass(frozen=True)
class _Variant:
    kind: str
    status: str
    reason: str = ""


@dataclasses.dataclass(frozen=True)
class _Report:
    variants: tuple
    notes: tuple = ()


@pytest.mark.parametrize("variants, says", [
    ((_Variant("eager", "baseline"),), True),
    ((_Variant("eager", "baseline"), _Variant("candidate", "not applied", "no aten::rms_norm call")), True),
    ((_Variant("eager", "baseline"), _Variant("candidate", "passed")), False),
    ((_Variant("eager", "baseline"), _Variant("candidate", "FAILED")), False),
])
def test_a_try_that_applied_nothing_says_so(variants, says):
    report = _Report(variants)
    if says:
        with pytest.warns(UserWarning, match="applied no kernel"):
            out = said_when_nothing_applied(report)
        assert out.notes and "applied no kernel" in out.notes[-1]
    else:
        assert said_when_nothing_applied(report) is report


def test_trying_kernels_on_a_cpu_runs_triton_interpreted(monkeypatch):
    """Run.try_kernels and try_kernel_file set TRITON_INTERPRET=1 on a CPU, as `advisor try-kernel`
    does, and say so when Triton kernels were decorated without it."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    lines: list[str] = []
    use_triton_interpreter("cuda", lines.append)
    assert "TRITON_INTERPRET" not in os.environ
    monkeypatch.setitem(sys.modules, "reference_kernels.triton._common", types.SimpleNamespace(INTERPRETED=False))
    use_triton_interpreter("cpu", lines.append)
    assert os.environ["TRITON_INTERPRET"] == "1"
    assert len(lines) == 1 and "imported before TRITON_INTERPRET=1" in lines[0]
