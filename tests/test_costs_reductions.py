"""Reductions, scans and softmax: output shapes from dims/keepdim, hand-worked and recorded."""
from __future__ import annotations

import pytest
import torch

from kernel_advisor.analyze.costs import op_cost
from test_costs_helpers import DTYPES, recorded, tensor_bytes


def test_mean_from_h200_trace():
    # aten::mean [[2,64,256],[],[],[]] dims [-1] keepdim True -> out [2,64,1]
    c = op_cost("aten::mean", [[2, 64, 256], [], [], []],
                ["float", "ScalarList", "Scalar", ""], ["", "[-1]", "True", ""])
    assert c.flops == 32768
    assert c.bytes == (32768 + 128) * 4


def test_sum_bias_grad_from_h200_trace():
    # aten::sum [[128,256],[],[],[]] dims [0] keepdim True -> [1,256]
    c = op_cost("aten::sum", [[128, 256], [], [], []], ["float", "ScalarList", "Scalar", ""],
                ["", "[0]", "True", ""])
    assert c.bytes == (128 * 256 + 256) * 4


def test_full_reductions_and_integer_sum():
    assert op_cost("aten::sum", [[5, 7], []], ["float", ""], ["", ""]).bytes == (35 + 1) * 4
    # int32 sums accumulate into int64: 35*4 + 8
    assert op_cost("aten::sum", [[5, 7], []], ["int", ""], ["", ""]).bytes == 35 * 4 + 8
    # dtype=float64 requested (code 7)
    assert op_cost("aten::sum", [[5, 7], []], ["float", "Scalar"], ["", "7"]).bytes == 148
    # an empty dim list reduces everything
    assert op_cost("aten::amax", [[5, 7], [], []], ["float", "ScalarList", "Scalar"],
                   ["", "[]", "False"]).bytes == 36 * 4


def test_max_overloads():
    # max(self) full; max.dim -> values + int64 indices; max.other is elementwise
    assert op_cost("aten::max", [[4, 6]], ["float"], [""]).bytes == (24 + 1) * 4
    assert op_cost("aten::max", [[4, 6], [], []], ["float", "Scalar", "Scalar"],
                   ["", "1", "False"]).bytes == 24 * 4 + 4 * 4 + 4 * 8
    assert op_cost("aten::max", [[4, 6], [4, 6]], ["float", "float"], ["", ""]).bytes == \
        3 * 24 * 4


def test_var_flops_and_missing_dims_are_unmodelled():
    c = op_cost("aten::var", [[10, 3], [], [], []], ["float", "ScalarList", "Scalar", "Scalar"],
                ["", "[1]", "1", "False"])
    assert c.flops == 4 * 30 and c.bytes == (30 + 10) * 4
    # a trace without concrete inputs cannot say which dims were reduced
    assert op_cost("aten::amax", [[4, 6], [], []], ["float", "ScalarList", "Scalar"],
                   []).bytes == (24 + 1) * 4  # NB: dim defaults to [] (all)
    assert op_cost("aten::max", [[4, 6], [], []], ["float", "Scalar", "Scalar"], []) is None


CASES = [
    ("aten::sum", lambda x: x.sum(dim=(0, 2), keepdim=True)),
    ("aten::mean", lambda x: x.mean(-1)),
    ("aten::amax", lambda x: x.amax(1)),
    ("aten::max", lambda x: x.max(0)),
    ("aten::argmax", lambda x: x.argmax(-1, keepdim=True)),
    ("aten::var", lambda x: x.var(1, correction=0)),
    ("aten::std_mean", lambda x: torch.std_mean(x, (0, 1), correction=0)),
    ("aten::norm", lambda x: torch.ops.aten.norm.ScalarOpt_dim(x, 2, [-1], False)),
    ("aten::linalg_vector_norm", lambda x: torch.linalg.vector_norm(x, 3, dim=0)),
    ("aten::logsumexp", lambda x: x.logsumexp(1)),
    ("aten::prod", lambda x: x.prod(2)),
    ("aten::any", lambda x: (x > 0).any(1)),
    ("aten::cumsum", lambda x: x.cumsum(1)),
    ("aten::softmax", lambda x: x.softmax(-1)),
    ("aten::log_softmax", lambda x: x.log_softmax(0, dtype=torch.float32)),
]


@pytest.mark.parametrize("name,fn", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 7, 127)])
def test_recorded_reductions_match_real_outputs(name, fn, dtype, shape):
    x = torch.randn(shape, dtype=dtype)
    inputs = (x > 0,) if name == "aten::any" else (x,)
    c = recorded(name, lambda: fn(x)).cost()
    assert c.bytes == tensor_bytes(inputs, fn(x))


def test_softmax_from_h200_trace_and_backward():
    # aten::softmax [[2,4,64,64],[],[]]: 5 flops per element, read + write fp32
    c = op_cost("aten::softmax", [[2, 4, 64, 64], [], []], ["float", "Scalar", ""],
                ["", "-1", ""])
    assert c.flops == 5 * 32768 and c.bytes == 2 * 32768 * 4
    # _softmax_backward_data(grad, out, dim, input_dtype=6): reads 2, writes 1
    c = op_cost("aten::_softmax_backward_data", [[2, 4, 64, 64], [2, 4, 64, 64], [], []],
                ["float", "float", "Scalar", "Scalar"], ["", "", "-1", "6"])
    assert c.flops == 4 * 32768 and c.bytes == 3 * 32768 * 4


def test_half_to_float_softmax():
    # _softmax(x fp16, dim, half_to_float=True): 2 bytes in, 4 bytes out per element
    c = op_cost("aten::_softmax", [[3, 5], [], []], ["c10::Half", "Scalar", "Scalar"],
                ["", "1", "True"])
    assert c.bytes == 15 * 2 + 15 * 4 and c.compute_dtype == "float32"
