"""--check-compile: torch._dynamo.explain output mapped to graph breaks with user frames."""
from __future__ import annotations

import traceback
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from kernel_advisor.errors import UserInputError
from kernel_advisor.recommend.evidence import check_compile, explain_callable, report_from_explain

MODEL_WITH_BREAKS = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        y = x * 2
        if y.sum().item() > 0:
            y = y + 1
        print("side effect")
        return y.relu()


def get_inputs():
    return [torch.ones(4, 8)]
'''


def frame(filename: str, lineno: int, name: str = "forward") -> traceback.FrameSummary:
    return traceback.FrameSummary(filename, lineno, name, lookup_line=False)


def test_report_keeps_user_frames_and_dedupes(tmp_path):
    model = tmp_path / "model.py"
    lib = "/usr/lib/python3/site-packages/torch/nn/modules/module.py"
    reason = SimpleNamespace(reason="Unsupported Tensor.item() call",
                             user_stack=[frame(lib, 1700, "_call_impl"), frame(str(model), 8)])
    output = SimpleNamespace(graph_count=2, graph_break_count=2, op_count=5, break_reasons=[reason, reason])
    report = report_from_explain(output, model.resolve())
    assert (report.graph_count, report.graph_break_count, report.op_count) == (2, 2, 5)
    assert len(report.breaks) == 1  # the same reason at the same place is one break
    assert report.breaks[0].frames == ("model.py:8 in forward",)
    assert report.summary() == "Unsupported Tensor.item() call at model.py:8 in forward"


def test_summary_limits_and_counts_the_rest():
    reasons = [SimpleNamespace(reason=f"reason {i}\ndetails", user_stack=[frame("/m.py", i)]) for i in range(5)]
    output = SimpleNamespace(graph_count=6, graph_break_count=5, op_count=1, break_reasons=reasons)
    summary = report_from_explain(output).summary(limit=2)
    assert summary == "reason 0 at m.py:0 in forward; reason 1 at m.py:1 in forward; and 3 more"


def test_explain_finds_the_breaks_in_a_real_module(tmp_path, capsys):
    model_file = tmp_path / "model_with_breaks.py"
    model_file.write_text(MODEL_WITH_BREAKS, encoding="utf-8")
    report = check_compile(model_file)
    assert report.graph_break_count == 2
    lines = sorted(b.where() for b in report.breaks)
    assert lines == ["model_with_breaks.py:10 in forward", "model_with_breaks.py:8 in forward"]
    assert "side effect" not in capsys.readouterr().out  # the model's prints go to stderr


def test_explain_without_breaks():
    report = explain_callable(torch.nn.Sequential(torch.nn.Linear(7, 3), torch.nn.ReLU()), [torch.ones(1, 7)])
    assert report.graph_break_count == 0 and report.graph_count == 1 and report.summary() == "none"


def test_untraceable_model_is_a_user_error():
    def broken(x):
        raise RuntimeError("model bug")

    with pytest.raises(UserInputError, match="could not trace the model"):
        explain_callable(broken, [torch.ones(2)])


def test_missing_model_file_is_a_user_error(tmp_path):
    with pytest.raises(UserInputError, match="does not exist"):
        check_compile(Path(tmp_path / "nope.py"))
