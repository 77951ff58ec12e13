"""Elementwise and activation costs: broadcasting, promotion, in-place, real recorded calls."""
from __future__ import annotations

import functools
import operator

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from kernel_advisor.analyze.costs import op_cost
from kernel_advisor.analyze.costs.dtypes import result_dtype
from test_costs_helpers import DTYPE_NAMES, DTYPES, recorded, tensor_bytes

ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
dims = st.integers(min_value=1, max_value=4096)
float_dtypes = st.sampled_from(sorted(ITEMSIZE))


def _add(a, b, dtype):
    return op_cost("aten::add", [a, b, []], [dtype, dtype, "Scalar"], ["", "", "1"])


@settings(max_examples=60, deadline=None)
@given(m=dims, n=dims, dtype=float_dtypes)
def test_bias_is_read_once(m, n, dtype):
    assert _add([m, n], [n], dtype).bytes == (m * n + n + m * n) * ITEMSIZE[dtype]


@settings(max_examples=60, deadline=None)
@given(m=dims, n=dims, grow=st.integers(1, 64), dtype=float_dtypes)
def test_bytes_non_negative_and_monotone(m, n, grow, dtype):
    small = _add([m, 1], [1, n], dtype)
    larger = _add([m + grow, 1], [1, n], dtype)
    assert 0 <= small.bytes <= larger.bytes
    # outer broadcast [m,1] + [1,n] -> [m,n]: reads m + n, writes m*n
    assert small.bytes == (m + n + m * n) * ITEMSIZE[dtype]
    assert small.flops == m * n


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=4), dtype=float_dtypes)
def test_inplace_reads_and_writes_self(shape, dtype):
    numel = int(torch.tensor(shape).prod())
    c = op_cost("aten::mul_", [shape, [shape[-1]]], [dtype, dtype], ["", ""])
    assert c.bytes == (2 * numel + shape[-1]) * ITEMSIZE[dtype]


def test_incompatible_broadcast_is_unmodelled():
    assert _add([3, 4], [5], "float32") is None


def test_wrapped_python_number_moves_no_memory():
    # aten::add [[2,64,1],[],[]] ['float','double','Scalar'] (x + eps in the H200 trace)
    c = op_cost("aten::add", [[2, 64, 1], [], []], ["float", "double", "Scalar"],
                ["", "", "1"])
    assert c.bytes == 2 * 128 * 4 and c.compute_dtype == "float32"


def test_mixed_precision_output():
    # bf16 [8,16] * fp32 [16] -> fp32 [8,16]: 8*16*2 + 16*4 + 8*16*4 = 256+64+512
    c = op_cost("aten::mul", [[8, 16], [16]], ["c10::BFloat16", "float"], ["", ""])
    assert c.bytes == 832 and c.compute_dtype == "float32"


def test_where_reads_bool_condition():
    # where(cond bool [3,4], x [3,4], 0.) -> 12 + 48 + 48 bytes
    c = op_cost("aten::where", [[3, 4], [3, 4], []], ["bool", "float", "Scalar"],
                ["", "", "0."])
    assert c.bytes == 12 + 48 + 48


def test_comparison_writes_bool():
    c = op_cost("aten::gt", [[3, 4], []], ["float", "Scalar"], ["", "0"])
    assert c.bytes == 48 + 12


@pytest.mark.parametrize("operands", [
    [("float32", 2)], [("float16", 2), ("float32", 0)], [("int32", 2), ("float32", 0)],
    [("bfloat16", 1), ("float16", 1)], [("int64", 1), ("int16", 0)], [("bool", 2), ("uint8", 0)],
])
@pytest.mark.parametrize("scalar", [None, 3, 2.5])
def test_result_dtype_matches_torch(operands, scalar):
    # (dtype name, ndim) operands, optionally plus a Python scalar, as torch promotes them.
    tensors = [torch.ones([2] * ndim, dtype=getattr(torch, name)) for name, ndim in operands]
    expected = functools.reduce(operator.add, tensors + ([scalar] if scalar is not None else []))
    categories = [] if scalar is None else [1 if isinstance(scalar, int) else 2]
    ours = result_dtype([n for n, d in operands if d], [n for n, d in operands if not d],
                        categories)
    assert ours == str(expected.dtype).removeprefix("torch.")


def test_zero_dim_double_reads_as_python_number():
    # NB in dtypes.result_dtype: int tensor + 0-dim double promotes like int + 2.5 -> float32
    assert result_dtype(["int32"], ["float64"], []) == "float32"


ACTIVATIONS = [
    ("aten::relu", F.relu, 1), ("aten::gelu", F.gelu, 5), ("aten::silu", F.silu, 2),
    ("aten::sigmoid", torch.sigmoid, 1), ("aten::tanh", torch.tanh, 1),
    ("aten::leaky_relu", F.leaky_relu, 2), ("aten::hardswish", F.hardswish, 4),
    ("aten::elu", F.elu, 3), ("aten::mish", F.mish, 3), ("aten::softplus", F.softplus, 3),
]


@pytest.mark.parametrize("name,fn,flops_per_element", ACTIVATIONS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1,), (7, 127), (1823, 781)])
def test_activations_real_calls(name, fn, flops_per_element, dtype, shape):
    x = torch.randn(shape, dtype=dtype)
    c = recorded(name, lambda: fn(x)).cost()
    assert c.bytes == tensor_bytes(x, fn(x))
    assert c.flops == flops_per_element * x.numel()
    assert c.compute_dtype == DTYPE_NAMES[dtype] and not c.uses_tensor_cores


def test_activation_backward_from_h200_trace():
    # aten::gelu_backward [[2,64,1024],[2,64,1024],[]]: reads grad and x, writes grad_in
    c = op_cost("aten::gelu_backward", [[2, 64, 1024], [2, 64, 1024], []],
                ["float", "float", ""], ["", "", ""])
    assert c.bytes == 3 * 131072 * 4
    assert c.flops == 11 * 131072


def test_dropout_train_eval_and_native():
    x = [[4, 8], [], []]
    assert op_cost("aten::dropout", x, ["float", "Scalar", "Scalar"],
                   ["", "0.5", "False"]).bytes == 0  # eval: returns its input
    assert op_cost("aten::dropout", x, ["float", "Scalar", "Scalar"],
                   ["", "0.5", "True"]).bytes == 2 * 32 * 4
    # native_dropout also writes the bool mask: 32*4 + 32*4 + 32
    assert op_cost("aten::native_dropout", x, ["c10::Half", "Scalar", "Scalar"],
                   ["", "0.1", "True"]).bytes == 32 * 2 * 2 + 32


@pytest.mark.parametrize("fn,name", [
    (lambda a, b: torch.addcmul(a, a, b, value=0.5), "aten::addcmul"),
    (lambda a, b: torch.lerp(a, b, 0.3), "aten::lerp"),
    (lambda a, b: torch.clamp(a, min=b), "aten::clamp"),
    (lambda a, b: torch.maximum(a, b), "aten::maximum"),
    (lambda a, b: a.masked_fill(b > 0, 1.0), "aten::masked_fill"),
    (lambda a, b: torch.pow(a, 2), "aten::pow"),
    (lambda a, b: a.add_(b), "aten::add_"),
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_fused_and_inplace_real_calls(fn, name, dtype):
    a, b = torch.randn(7, 33, dtype=dtype), torch.randn(33, dtype=dtype)
    event = recorded(name, lambda: fn(a.clone(), b))
    # addcmul(a, a, b) passes `a` twice: both operands are read (aliasing is not recorded)
    expected_inputs = {"aten::pow": [a], "aten::masked_fill": [a, b > 0],
                       "aten::addcmul": [a, a, b]}.get(name, [a, b])
    out = fn(a.clone(), b)
    assert event.cost().bytes == tensor_bytes(expected_inputs, out)
