"""Pooling costs: output sizes (stride, padding, dilation, ceil_mode) against real calls."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernel_advisor.analyze.costs import op_cost
from test_costs_helpers import DTYPES, record, recorded, tensor_bytes


def test_max_pool2d_hand_worked():
    # x [1,2,5,5], kernel 2, stride = kernel -> out [1,2,2,2]: 8 outputs * 4 window compares
    c = op_cost("aten::max_pool2d", [[1, 2, 5, 5], [], [], [], [], []],
                ["float", "ScalarList", "ScalarList", "ScalarList", "ScalarList", "Scalar"],
                ["", "[2, 2]", "[]", "[0, 0]", "[1, 1]", "False"])
    assert c.flops == 8 * 4
    assert c.bytes == (50 + 8) * 4


def test_avg_pool2d_ceil_mode_hand_worked():
    # 5 + 2*1 - 3 = 4, ceil(4/2) + 1 = 3 outputs per dim (the last window starts at 4 < 5+1)
    c = op_cost("aten::avg_pool2d", [[1, 2, 5, 5], [], [], [], [], [], []],
                ["float", "ScalarList", "ScalarList", "ScalarList", "Scalar", "Scalar", ""],
                ["", "[3, 3]", "[2, 2]", "[1, 1]", "True", "True", ""])
    assert c.bytes == (50 + 2 * 3 * 3) * 4
    assert c.flops == 18 * 9


CASES = [
    ("aten::max_pool2d_with_indices",
     lambda x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True)),
    ("aten::max_pool2d_with_indices", lambda x: F.max_pool2d(x, (2, 3), dilation=2,
                                                             return_indices=True)),
    ("aten::avg_pool2d", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True)),
    ("aten::avg_pool2d", lambda x: F.avg_pool2d(x, (1, 4), (1, 3))),
    ("aten::adaptive_avg_pool2d", lambda x: F.adaptive_avg_pool2d(x, (5, 4))),
    ("aten::adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, 3, return_indices=True)),
    ("aten::max_pool1d", lambda x: F.max_pool1d(x.flatten(2), 4, 3)),
    ("aten::avg_pool1d", lambda x: F.avg_pool1d(x.flatten(2), 5, 2, 2, ceil_mode=True)),
    ("aten::max_pool3d_with_indices", lambda x: F.max_pool3d(x[None], (1, 2, 2),
                                                             return_indices=True)),
    ("aten::avg_pool3d", lambda x: F.avg_pool3d(x[None], (1, 2, 2), padding=(0, 1, 1))),
]


@pytest.mark.parametrize("name,fn", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(2, 3, 17, 13), (1, 1, 7, 7)])
def test_pooling_bytes_match_real_outputs(name, fn, dtype, shape):
    if name == "aten::avg_pool3d" and dtype != torch.float32:
        pytest.skip("the CPU avg_pool3d kernel has no half-precision variant")
    x = torch.randn(shape, dtype=dtype)
    source = x.flatten(2) if name.endswith("pool1d") else (x[None] if "3d" in name else x)
    c = recorded(name, lambda: fn(x)).cost()
    assert c.bytes == tensor_bytes(source, fn(x))


def test_pooling_backward_recorded():
    x = torch.randn(2, 3, 9, 8, requires_grad=True)
    events = record(lambda: (F.max_pool2d(x, 2).sum() + F.avg_pool2d(x, 3).sum()
                             + F.adaptive_avg_pool2d(x, 4).sum()).backward())
    backward = {e.name: e.cost() for e in events if e.name.endswith("_backward")}
    grad_in = x.numel() * 4
    # max: reads grad [2,3,4,4] + int64 indices, writes grad_input
    assert backward["aten::max_pool2d_with_indices_backward"].bytes == \
        96 * 4 + 96 * 8 + grad_in
    # avg 3x3: reads grad [2,3,3,2], writes grad_input
    assert backward["aten::avg_pool2d_backward"].bytes == 36 * 4 + grad_in
    assert backward["aten::_adaptive_avg_pool2d_backward"].bytes == 96 * 4 + grad_in
