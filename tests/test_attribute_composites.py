"""A composite aten op without a cost formula leaves its time to the aten ops it calls.

torch.linalg.multi_dot is CompositeImplicitAutograd: it launches nothing itself. Without a formula
of its own, its children (mm) get the rows.
"""
from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from kernel_advisor.analyze.costs import modelled_op_names
from kernel_advisor.collect.attribute import attribute, composite_implicit
from kernel_advisor.collect.trace import read_trace
from kernel_advisor.pipeline import has_formula

A, B, C = torch.randn(32, 64), torch.randn(64, 16), torch.randn(16, 8)


def _rows(tmp_path, fn, priced):
    """{op name: its rows' time} of one CPU run of fn."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    ops = attribute(read_trace(path), "cpu", priced=priced).ops
    return ops.groupby("name")["device_time_total_s"].sum().to_dict()


@pytest.mark.parametrize("name, implicit", [("aten::linalg_multi_dot", True), ("aten::linear", True),
                                            ("aten::topk", False), ("aten::not_an_op", False)])
def test_composite_implicit_reads_torchs_dispatch_table(name, implicit):
    assert composite_implicit(name) is implicit


def test_an_unpriced_composite_hands_its_time_to_its_children(tmp_path):
    assert "aten::linalg_multi_dot" not in modelled_op_names()
    chain = lambda: torch.linalg.multi_dot([A, B, C])  # noqa: E731
    assert "aten::mm" not in _rows(tmp_path, chain, None)  # the composite owns its two mm calls
    rows = _rows(tmp_path, chain, has_formula)
    # the mm calls own their time; on CPU the composite keeps only its own dispatch time (on a GPU,
    # which runs no kernel of it, nothing)
    assert rows["aten::mm"] > 0 and rows.get("aten::linalg_multi_dot", 0.0) < rows["aten::mm"]


def test_a_priced_composite_keeps_its_row(tmp_path):
    # aten::linear is composite too, but has a formula: the user sees the op they wrote
    rows = _rows(tmp_path, lambda: torch.nn.functional.linear(A, B.T), has_formula)
    assert "aten::linear" in rows and "aten::addmm" not in rows and "aten::mm" not in rows
