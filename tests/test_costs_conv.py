"""Convolution cost formulas: hand-worked numbers, real recorded calls, FlopCounterMode."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from kernel_advisor.analyze.costs import op_cost
from test_costs_helpers import DTYPE_NAMES, record, recorded, tensor_bytes

CONV2D_TYPES = ["float", "float", "float", "ScalarList", "ScalarList", "ScalarList", "Scalar"]


def test_conv2d_hand_worked():
    # x [2,3,9,7], w [5,3,3,3], stride (2,1), padding 1 -> out H = (9+2-2-1)//2+1 = 5,
    # W = (7+2-2-1)//1+1 = 7: out [2,5,5,7] = 350 elements.
    c = op_cost("aten::conv2d", [[2, 3, 9, 7], [5, 3, 3, 3], [5], [], [], [], []],
                CONV2D_TYPES, ["", "", "", "[2, 1]", "[1, 1]", "[1, 1]", "1"])
    assert c.flops == 2 * 350 * 3 * 3 * 3  # 2 * out elements * C_in * kh * kw = 18900
    assert c.bytes == (2 * 3 * 9 * 7 + 5 * 3 * 3 * 3 + 5 + 350) * 4  # (378+135+5+350)*4
    assert c.uses_tensor_cores


def test_grouped_depthwise_conv1d():
    # depthwise: x [4,8,100], w [8,1,5], groups 8, padding 2 -> out [4,8,100]
    c = op_cost("aten::conv1d", [[4, 8, 100], [8, 1, 5], [], [], [], [], []],
                ["c10::BFloat16", "c10::BFloat16", "", "ScalarList", "ScalarList",
                 "ScalarList", "Scalar"], ["", "", "", "[1]", "[2]", "[1]", "8"])
    assert c.flops == 2 * 4 * 8 * 100 * 5  # each output sees C_in/groups = 1 channel * 5 taps
    assert c.bytes == (4 * 8 * 100 * 2 + 8 * 5) * 2
    assert c.compute_dtype == "bfloat16"


def test_conv_transpose2d_hand_worked():
    # x [2,5,5,7], w [5,4,2,2], stride 2 -> out [2,4,10,14]; flops count input points:
    # 2 * (2*5*7) * (5 in * 4 out) * (2*2) = 11200
    c = op_cost("aten::conv_transpose2d", [[2, 5, 5, 7], [5, 4, 2, 2], [], [], [], [], [], []],
                ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar",
                 "ScalarList"], ["", "", "", "[2, 2]", "[0, 0]", "[0, 0]", "1", "[1, 1]"])
    assert c.flops == 11200
    assert c.bytes == (2 * 5 * 5 * 7 + 5 * 4 * 2 * 2 + 2 * 4 * 10 * 14) * 4


def test_convolution_backward_hand_worked():
    # grad_input and grad_weight each cost one forward conv: 2 * 18900 (see conv2d above);
    # bias_sizes [5] with mask [T, T, T] adds grad_bias [5].
    c = op_cost("aten::convolution_backward",
                [[2, 5, 5, 7], [2, 3, 9, 7], [5, 3, 3, 3]] + [[]] * 8,
                ["float"] * 3 + ["ScalarList"] * 4 + ["Scalar", "ScalarList", "Scalar",
                                                       "ScalarList"],
                ["", "", "", "[5]", "[2, 1]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1",
                 "[True, True, True]"])
    assert c.flops == 2 * 18900
    # reads grad_out 350, weight 135, input 378; writes grad_in 378, grad_w 135, grad_b 5
    assert c.bytes == (350 + 135 + 378 + 378 + 135 + 5) * 4


def test_string_padding_is_unmodelled():
    # conv2d(padding="same") records the string as "" - the output size is unknown.
    assert op_cost("aten::conv2d", [[1, 2, 5, 5], [3, 2, 3, 3], [], [], [], [], []],
                   ["float", "float", "", "ScalarList", "", "ScalarList", "Scalar"],
                   ["", "", "", "[1, 1]", "", "[1, 1]", "1"]) is None


CASES = [
    # (input shape, weight shape, kwargs, transposed)
    ((1, 3, 1), (4, 3, 1), {}, False),
    ((2, 4, 127), (6, 2, 7), dict(stride=3, padding=2, dilation=2, groups=2), False),
    ((2, 3, 17, 13), (8, 3, 3, 5), dict(stride=(2, 1), padding=(1, 2)), False),
    ((3, 9, 11), (4, 3, 3, 3), dict(padding=1), False),  # unbatched
    ((1, 2, 5, 6, 7), (4, 2, 3, 1, 2), dict(stride=(1, 2, 1)), False),
    ((2, 6, 7, 5), (6, 2, 3, 3), dict(stride=2, padding=1, output_padding=1, groups=3), True),
    ((2, 4, 9), (4, 3, 4), dict(stride=3), True),
]
FUNCS = {(3, False): F.conv1d, (4, False): F.conv2d, (5, False): F.conv3d,
         (3, True): F.conv_transpose1d, (4, True): F.conv_transpose2d}


@pytest.mark.parametrize("x_shape,w_shape,kwargs,transposed", CASES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_conv_bytes_match_real_tensors(x_shape, w_shape, kwargs, transposed, dtype):
    fn = FUNCS[(len(w_shape), transposed)]
    x, w = torch.randn(x_shape, dtype=dtype), torch.randn(w_shape, dtype=dtype)
    out = fn(x, w, **kwargs)
    event = recorded(f"aten::{fn.__name__}", lambda: fn(x, w, **kwargs))
    assert event.cost().bytes == tensor_bytes(x, w, out)
    assert event.cost().compute_dtype == DTYPE_NAMES[dtype]


def test_flops_equal_flop_counter_mode_forward_and_backward():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 9, 7, requires_grad=True)
    w = torch.randn(6, 3, 3, 3, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    wt = torch.randn(6, 4, 2, 2, requires_grad=True)
    w1 = torch.randn(6, 2, 3, requires_grad=True)

    def model():
        y = F.conv2d(x, w, b, stride=(2, 1), padding=1)
        z = F.conv_transpose2d(y, wt, stride=2, groups=2)
        v = F.conv1d(z.flatten(2)[:, :4], w1, groups=2, dilation=2)
        (z.sum() + v.sum()).backward()

    with FlopCounterMode(display=False) as counter:
        model()
    events = record(model)
    total = sum(e.cost().flops for e in events
                if e.name in ("aten::convolution", "aten::convolution_backward"))
    assert counter.get_total_flops() > 0
    assert total == counter.get_total_flops()
    forward = {"aten::conv1d", "aten::conv2d", "aten::conv_transpose2d"}
    outer = sum(e.cost().flops for e in events if e.name in forward)
    assert outer == counter.get_flop_counts()["Global"][torch.ops.aten.convolution]
