"""aten::index as torch.profiler records it (no shapes for its Tensor?[] indices): attribution
reads the output's size off the as_strided view ATen makes of `self`, and the call is priced."""
from __future__ import annotations

import json

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from kernel_advisor.analyze.costs import cost_arguments, op_cost
from kernel_advisor.collect.attribute import attribute
from kernel_advisor.collect.trace import read_trace

X = torch.randn(4, 9, 9)
LI, LJ = torch.triu_indices(9, 9, 1)
ROWS = torch.tensor([0, 2, 3, 3, 1])
MASK = torch.tensor([True] * 4 + [False] * 5)
CASES = {  # the indexing expression and its output shape
    "pairs": (lambda: X[:, LI, LJ], (4, 36)),  # the interaction pairs of a DLRM-style model
    "rows": (lambda: X[ROWS], (5, 9, 9)),
    "mask": (lambda: X[:, :, MASK], (4, 9, 4)),
}


def _index_rows(tmp_path, fn, cost_args=None):
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        fn()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    ops = attribute(read_trace(path), "cpu", cost_args).ops
    return ops[ops["name"] == "aten::index"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_indexing_without_recorded_indices_is_priced_from_its_view(tmp_path, case):
    fn, out_shape = CASES[case]
    assert tuple(fn().shape) == out_shape
    (row,) = [r for _, r in _index_rows(tmp_path, fn).iterrows()]
    assert json.loads(row["input_shapes"])[1] == []  # the profiler recorded no index shapes
    cost = op_cost("aten::index", json.loads(row["input_shapes"]), json.loads(row["input_dtypes"]),
                   json.loads(row["concrete_inputs"]))
    # each output element read from x and written: pairs 2 * 4*36 * 4 bytes = 1152
    assert cost.flops == 0 and cost.bytes == 2 * torch.Size(out_shape).numel() * 4


def test_two_gathers_of_different_sizes_get_rows_of_their_own(tmp_path):
    rows = _index_rows(tmp_path, lambda: (X[ROWS], X[ROWS[:2]]), cost_arguments)
    assert sorted(json.loads(c)[1] for c in rows["concrete_inputs"]) == ["[2, 9, 9]", "[5, 9, 9]"]


def test_without_a_view_the_call_stays_unknown():
    assert op_cost("aten::index", [[4, 9, 9], []], ["float", ""], ["", ""]) is None
