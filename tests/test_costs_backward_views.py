"""Backward of views, pads and embedding_bag: recorded on CPU as the profiler records them, and
the calls an H200 training trace recorded (benchmarks/advice models in train mode), hand-worked."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from kernel_advisor.analyze.costs import op_cost
from test_costs_helpers import record

F32 = 4


def _backward_event(name, fn):
    events = [e for e in record(fn) if e.name == name]
    assert events, f"{name} was not recorded"
    return events[0]


@pytest.mark.parametrize("name, view", [("aten::slice_backward", lambda x: x[:, 1:4]),
                                        ("aten::select_backward", lambda x: x[:, 2])])
def test_view_backward_writes_the_input_sized_gradient(name, view):
    # x [3, 5, 7] f32: the gradient of the view is read, a [3, 5, 7] gradient written
    x = torch.randn(3, 5, 7, requires_grad=True)
    cost = _backward_event(name, lambda: view(x).sum().backward()).cost()
    grad_elements = view(x).numel()
    assert cost.flops == 0 and cost.bytes == (grad_elements + 3 * 5 * 7) * F32


@pytest.mark.parametrize("mode, dims, pad", [("reflect", 2, (1, 1, 2, 2)), ("replicate", 1, (3, 1)),
                                             ("reflect", 3, (1, 1, 1, 1, 1, 1))])
def test_pad_backward_adds_each_border_element_back(mode, dims, pad):
    shape = (2, 3, 6, 6, 6)[:2 + dims]
    x = torch.randn(*shape, requires_grad=True)
    out = F.pad(x, pad, mode=mode)
    name = f"aten::{'reflection' if mode == 'reflect' else 'replication'}_pad{dims}d_backward"
    cost = _backward_event(name, lambda: F.pad(x, pad, mode=mode).sum().backward()).cost()
    assert cost.flops == out.numel() - x.numel()
    assert cost.bytes == (out.numel() + x.numel()) * F32


def test_recorded_h200_reflection_pad_backward_hand_worked():
    # style_instance_norm, train: grad [4,128,258,258] bf16 onto x [4,128,256,256], padding 1
    cost = op_cost("aten::reflection_pad2d_backward", [[4, 128, 258, 258], [4, 128, 256, 256], []],
                   ["bfloat16", "bfloat16", "ScalarList"], ["", "", "[1, 1, 1, 1]"])
    assert cost.flops == 512 * (258 * 258 - 256 * 256)  # 526,336 border adds
    assert cost.bytes == 68_161_536 + 67_108_864  # read the padded gradient, write the input's


@pytest.mark.parametrize("mode, flops_per_index", [("sum", 1), ("mean", 1)])
def test_embedding_bag_backward_recorded(mode, flops_per_index):
    # 9 indices into 4 bags of a [10, 6] table: a dense [10, 6] gradient, one add per index and
    # column (mean: one divide more per bag and column)
    bag = nn.EmbeddingBag(10, 6, mode=mode)
    idx, offsets = torch.tensor([1, 2, 3, 4, 5, 6, 7, 8, 9]), torch.tensor([0, 2, 5, 5])
    event = _backward_event("aten::_embedding_bag_backward", lambda: bag(idx, offsets).sum().backward())
    cost = event.cost()
    assert cost.flops == flops_per_index * 9 * 6 + (4 * 6 if mode == "mean" else 0)
    # read: grad 4*6*4 = 96, indices 9*8 = 72, offsets, bag_size and max indices 4*8 each
    # (offset2bag as recorded: [0] for sum, [9] for mean); written: the [10, 6] gradient, 240
    offset2bag = 0 if mode == "sum" else 9 * 8
    assert cost.bytes == 96 + 72 + 3 * 32 + offset2bag + 240
    dense = _backward_event("aten::_embedding_bag_dense_backward",
                            lambda: bag(idx, offsets).sum().backward()).cost()
    assert dense.flops == cost.flops and dense.bytes == 96 + 72 + 9 * 8 + 2 * 32 + 240


def test_recorded_h200_embedding_bag_backward_hand_worked():
    # embedding_bag_recsys, train: grad [4096, 64] bf16, 81920 indices, 100000 x 64 table, sum
    shapes = [[4096, 64], [81920], [4096], [81920], [4096], [0], [], [], [], [], [], []]
    dtypes = ["bfloat16", "int64", "int64", "int64", "int64", "int64", "scalar", "scalar", "scalar", "scalar", "",
              "scalar"]
    concrete = ["", "", "", "", "", "", "100000", "False", "0", "False", "", "-1"]
    cost = op_cost("aten::_embedding_bag_backward", shapes, dtypes, concrete)
    assert cost.flops == 81920 * 64  # one add per index and column
    # read: grad 524,288 + indices 655,360 + offsets 32,768 + offset2bag 655,360 + bag_size 32,768;
    # written: the dense 100000 x 64 bf16 gradient, 12,800,000
    assert cost.bytes == 1_900_544 + 12_800_000
    sparse = concrete[:9] + ["True"] + concrete[10:]
    assert op_cost("aten::_embedding_bag_backward", shapes, dtypes, sparse).bytes == 1_900_544 + 81920 * 64 * 2


def test_view_backward_rejects_sizes_smaller_than_the_gradient():
    assert op_cost("aten::slice_backward", [[8, 16], [], [], [], [], []],
                   ["float32", "ScalarList", "scalar", "scalar", "scalar", "scalar"],
                   ["", "[8, 4]", "1", "0", "4", "1"]) is None
