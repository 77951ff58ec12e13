"""Backward work in attribution: each row names the autograd node it ran under and the
forward op that node serves (profiler "Sequence number"), on real traces."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from kernel_advisor.collect.attribute import attribute
from kernel_advisor.collect.nesting import innermost_marked, op_label
from kernel_advisor.collect.trace import read_trace

DATA = Path(__file__).parent / "data"
ACCUMULATE = "torch::autograd::AccumulateGrad"


@pytest.fixture(scope="module")
def train_cpu(tmp_path_factory):
    """Two train steps of linear → * w → relu → sum on CPU, as torch.profiler records them."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16)
    w = torch.randn(32, 16, requires_grad=True)
    x = torch.randn(32, 16)
    path = tmp_path_factory.mktemp("autograd") / "train_cpu.json"
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for i in range(2):
            with record_function(f"advisor::step#{i}"):
                (lin(x) * w).relu().sum().backward()
    prof.export_chrome_trace(str(path))
    return attribute(read_trace(path), "cpu")


def rows(att, name, shapes=None, **cols):
    ops = att.ops[att.ops["name"] == name]
    if shapes is not None:
        ops = ops[ops["input_shapes"] == shapes]
    for col, value in cols.items():
        ops = ops[ops[col] == value]
    return ops


def test_backward_rows_name_the_forward_op_they_serve(train_cpu):
    att = train_cpu
    # Seen in this trace: aten::linear (seq N) → aten::t (N, makes TBackward0) → aten::addmm
    # (N+1, makes AddmmBackward0); the node scopes carry N and N+1, so both nodes' work serves the
    # forward occurrence that owns those ops: aten::linear, not its inner aten::addmm.
    mm = rows(att, "aten::mm")
    assert len(mm) >= 1
    assert set(mm["backward_of"]) == {"aten::linear"} and set(mm["autograd_node"]) == {"AddmmBackward0"}
    assert not mm["autograd_internal"].any()
    assert set(rows(att, "aten::threshold_backward")["backward_of"]) == {"aten::relu"}
    assert set(rows(att, "aten::t", autograd_node="TBackward0")["backward_of"]) == {"aten::linear"}
    forward = rows(att, "aten::linear")
    assert len(forward) == 1 and forward.iloc[0]["backward_of"] == "" and forward.iloc[0]["autograd_node"] == ""


def test_forward_and_backward_occurrences_never_share_a_row(train_cpu):
    att = train_cpu
    # y * w and MulBackward0's grad * w are both aten::mul over [32,16] x [32,16]
    muls = rows(att, "aten::mul", "[[32,16],[32,16]]")
    assert len(muls) == 2
    fwd = muls[muls["autograd_node"] == ""].iloc[0]
    bwd = muls[muls["autograd_node"] == "MulBackward0"].iloc[0]
    assert (fwd["calls"], bwd["calls"]) == (2, 4)  # two steps; grad * w and grad * y per step
    assert bwd["backward_of"] == "aten::mul"
    assert op_label(bwd["name"], bwd["backward_of"], bwd["autograd_node"], bwd["autograd_internal"]) == \
        "aten::mul (backward of aten::mul)"
    assert op_label(fwd["name"], fwd["backward_of"], fwd["autograd_node"], fwd["autograd_internal"]) == "aten::mul"
    seq = att.sequence
    for row_id, node in ((fwd["row_id"], ""), (bwd["row_id"], "MulBackward0")):
        assert set(seq.loc[seq["row_id"] == row_id, "autograd_node"]) == {node}
    assert att.ops["device_time_total_s"].sum() == pytest.approx(att.total_device_time_s, rel=1e-9)


def test_engine_work_is_internal_and_attributed_to_the_forward_op(train_cpu):
    att = train_cpu
    # The bias gradient's reduction runs in the AddmmBackward0 scope but outside the node's own
    # event: the engine's sum_to (validate_outputs), not addmm's formula.
    reduce = rows(att, "aten::sum", autograd_node="AddmmBackward0")
    assert len(reduce) == 1
    assert bool(reduce.iloc[0]["autograd_internal"]) and reduce.iloc[0]["backward_of"] == "aten::linear"
    # Second step: .grad exists, AccumulateGrad adds into it. AccumulateGrad has no sequence number.
    acc = rows(att, "aten::add_", autograd_node=ACCUMULATE)
    assert len(acc) == 3 and acc["autograd_internal"].all() and set(acc["backward_of"]) == {""}
    assert op_label("aten::add_", "", ACCUMULATE, True) == "aten::add_ (gradient accumulation: AccumulateGrad)"


def test_backward_on_the_autograd_thread_finds_its_forward_op():
    # H200 fixture: the backward runs on the autograd device thread, the forward on the main one
    att = attribute(read_trace(DATA / "cuda_gpt_train.json.gz"), "cuda")
    assert set(rows(att, "aten::gelu_backward")["backward_of"]) == {"aten::gelu"}
    assert set(rows(att, "aten::_softmax_backward_data")["backward_of"]) == {"aten::softmax"}
    assert set(rows(att, "aten::mm")["backward_of"]) >= {"aten::linear"}
    assert set(rows(att, "aten::linear")["autograd_node"]) == {""}


def test_innermost_marked():
    #        0    1   2   3   4   5
    parent = np.array([-1, 0, 1, 2, -1, 4])
    marked = np.array([True, False, True, False, False, False])
    assert innermost_marked(parent, marked).tolist() == [0, 0, 2, 2, -1, -1]
