"""Properties of the cost formulas over random shapes: never raising, non-negative, monotone
in sizes, broadcasting read once. No tensors are made: op_cost is pure arithmetic.
"""
from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.extra.numpy import mutually_broadcastable_shapes

from kernel_advisor.analyze.costs import modelled_op_names, op_cost
from kernel_advisor.analyze.costs.norms import FORWARD_FLOPS_PER_ELEMENT

ITEMSIZE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}
FLOATS = st.sampled_from(sorted(ITEMSIZE_BYTES))
# Odd sizes on purpose: 1 (broadcast and degenerate), 7, 127, 781, 1823, and anything up to 2048.
SIZES = st.one_of(st.sampled_from([1, 7, 127, 781, 1823]), st.integers(1, 2048))
GROW = st.integers(1, 64)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def numel(shape) -> int:
    return math.prod(shape)


def assert_no_smaller(small, large) -> None:
    assert small is not None and large is not None
    assert 0 <= small.flops <= large.flops and 0 <= small.bytes <= large.bytes


# ---------------------------------------------------------------- any op, any recorded arguments

PROFILER_DTYPES = ["float", "c10::Half", "c10::BFloat16", "double", "long int", "int", "bool", "Scalar",
                   "ScalarList", "", "TensorList", "float32", "bfloat16", "int64", "scalar", "GenericList",
                   "c10::Float8_e4m3fn", "unsigned char", "c10::complex<float>", "nonsense"]
CONCRETE = ["", "1", "-1", "0", "2", "-2", "True", "False", "[0]", "[1, 1]", "[0, 0]", "[-1]", "[2, 1]", "1e-05",
            "none", "tanh", "None", "7", "inf", "nan", "[]", "3.5", "6", "15", "[True, False]", "mean"]
DIM = st.integers(0, 9)
ARG_SHAPE = st.one_of(st.lists(DIM, max_size=4), st.lists(st.lists(DIM, max_size=3), min_size=1, max_size=3))
ARGS = st.integers(0, 8).flatmap(lambda n: st.tuples(
    st.lists(ARG_SHAPE, min_size=n, max_size=n), st.lists(st.sampled_from(PROFILER_DTYPES), min_size=n, max_size=n),
    st.lists(st.sampled_from(CONCRETE), min_size=n, max_size=n)))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(name=st.sampled_from(sorted(modelled_op_names())), args=ARGS)
def test_any_recorded_call_is_priced_or_unmodelled_never_an_exception(name, args):
    # A float8 operand next to another dtype once raised torch's promotion RuntimeError here.
    cost = op_cost(name, *args)
    if cost is not None:
        assert math.isfinite(cost.flops) and cost.flops >= 0
        assert math.isfinite(cost.bytes) and cost.bytes >= 0
        assert isinstance(cost.compute_dtype, str) and cost.compute_dtype


def test_float8_promotion_is_unmodelled_not_a_crash():
    # torch.promote_types(float8_e4m3fn, float32) raises: ATen would refuse the op too.
    assert op_cost("aten::add", [[4], [4], []], ["c10::Float8_e4m3fn", "float", "Scalar"], ["", "", "1"]) is None


# ---------------------------------------------------------------- elementwise broadcasting

def binary(name: str, a, b, dtype: str):
    return op_cost(name, [list(a), list(b), []], [dtype, dtype, "Scalar"], ["", "", "1"])


# min_dims=1: a 0-dim float64 operand is priced as a Python number wrapped by ATen (moves no
# memory), a documented convention of the cost model that this property is not about.
@FAST
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=4, max_side=9),
       name=st.sampled_from(["aten::add", "aten::mul", "aten::sub", "aten::maximum", "aten::div"]), dtype=FLOATS)
def test_broadcast_operands_are_read_once_and_the_output_written_once(shapes, name, dtype):
    (a, b), out = shapes.input_shapes, shapes.result_shape
    cost = binary(name, a, b, dtype)
    # e.g. add([4,1,5], [6,5]) -> [4,6,5]: 120 flops, (20 + 30 + 120) * 4 = 680 bytes in float32
    assert cost.flops == numel(out)
    assert cost.bytes == (numel(a) + numel(b) + numel(out)) * ITEMSIZE_BYTES[dtype]
    swapped = binary(name, b, a, dtype)
    assert (swapped.flops, swapped.bytes) == (cost.flops, cost.bytes)


def test_broadcast_hand_worked():
    cost = binary("aten::add", [4, 1, 5], [6, 5], "float32")
    assert (cost.flops, cost.bytes) == (120, 680)  # 4*6*5 = 120; (20 + 30 + 120) * 4 = 680


@FAST
@given(shapes=mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=4, max_side=9), dtype=FLOATS)
def test_comparisons_write_one_byte_per_element(shapes, dtype):
    (a, b), out = shapes.input_shapes, shapes.result_shape
    cost = binary("aten::lt", a, b, dtype)
    assert cost.bytes == (numel(a) + numel(b)) * ITEMSIZE_BYTES[dtype] + numel(out)  # bool output


@FAST
@given(batch=SIZES, rest=st.lists(SIZES, min_size=1, max_size=2), dtype=FLOATS,
       name=st.sampled_from(["aten::gelu", "aten::relu", "aten::exp", "aten::neg"]))
def test_unary_cost_is_linear_in_the_batch(batch, rest, dtype, name):
    one = op_cost(name, [[batch, *rest], []], [dtype, ""], ["", "none"])
    two = op_cost(name, [[2 * batch, *rest], []], [dtype, ""], ["", "none"])
    assert (two.flops, two.bytes) == (2 * one.flops, 2 * one.bytes)


@FAST
@given(m=SIZES, n=SIZES, grow=GROW, dtype=FLOATS)
def test_broadcast_bias_costs_less_than_a_full_operand(m, n, grow, dtype):
    bias = binary("aten::add", [m, n], [n], dtype)
    full = binary("aten::add", [m, n], [m, n], dtype)
    assert bias.flops == full.flops and bias.bytes <= full.bytes
    assert_no_smaller(bias, binary("aten::add", [m + grow, n], [n], dtype))


# ---------------------------------------------------------------- matrix products, conv, norms, reductions

@FAST
@given(m=SIZES, k=SIZES, n=SIZES, grow=GROW, which=st.integers(0, 2), dtype=FLOATS)
def test_mm_is_2mkn_reads_once_and_grows_with_every_dim(m, k, n, grow, which, dtype):
    def mm(m, k, n):
        return op_cost("aten::mm", [[m, k], [k, n]], [dtype, dtype], ["", ""])

    cost = mm(m, k, n)
    assert cost.flops == 2 * m * k * n  # e.g. 1823 x 781 @ 781 x 7: 2*1823*781*7 = 19,932,682
    assert cost.bytes == (m * k + k * n + m * n) * ITEMSIZE_BYTES[dtype]
    dims = [m, k, n]
    dims[which] += grow
    assert_no_smaller(cost, mm(*dims))


@FAST
@given(batch=st.lists(SIZES, min_size=1, max_size=2), k=SIZES, n=SIZES, grow=GROW, dtype=FLOATS)
def test_linear_grows_with_the_batch(batch, k, n, grow, dtype):
    def linear(batch):
        return op_cost("aten::linear", [[*batch, k], [n, k], [n]], [dtype] * 3, [""] * 3)

    cost = linear(batch)
    assert cost.flops == 2 * numel(batch) * k * n
    assert_no_smaller(cost, linear([batch[0] + grow, *batch[1:]]))


CONV_TYPES = ["float32"] * 3 + ["ScalarList"] * 3 + ["Scalar"]


@FAST
@given(shape=st.tuples(*[st.integers(1, 16)] * 5), grow=GROW, which=st.integers(0, 4), dtype=FLOATS)
def test_conv2d_3x3_same_padding_hand_formula_and_monotone(shape, grow, which, dtype):
    def conv(n, c, o, h, w):
        types = [dtype] * 3 + CONV_TYPES[3:]
        return op_cost("aten::conv2d", [[n, c, h, w], [o, c, 3, 3], [o], [], [], [], []], types,
                       ["", "", "", "[1, 1]", "[1, 1]", "[1, 1]", "1"])

    n, c, o, h, w = shape
    cost = conv(*shape)
    out = n * o * h * w  # stride 1, padding 1: (h + 2 - 2 - 1) // 1 + 1 = h
    assert cost.flops == 2 * out * c * 9
    assert cost.bytes == (n * c * h * w + o * c * 9 + o + out) * ITEMSIZE_BYTES[dtype]
    grown = list(shape)
    grown[which] += grow
    assert_no_smaller(cost, conv(*grown))


@FAST
@given(shape=st.lists(SIZES, min_size=1, max_size=3), grow=GROW, dtype=FLOATS, data=st.data())
def test_softmax_reads_and_writes_once_and_grows_with_any_dim(shape, grow, dtype, data):
    def softmax(shape):
        return op_cost("aten::_softmax", [shape, [], []], [dtype, "Scalar", "Scalar"], ["", "-1", "False"])

    cost = softmax(shape)
    assert cost.flops == FORWARD_FLOPS_PER_ELEMENT * numel(shape)
    assert cost.bytes == 2 * numel(shape) * ITEMSIZE_BYTES[dtype]
    axis = data.draw(st.integers(0, len(shape) - 1))
    assert_no_smaller(cost, softmax([s + grow if i == axis else s for i, s in enumerate(shape)]))


@FAST
@given(shape=st.lists(SIZES, min_size=1, max_size=3), keepdim=st.booleans(), grow=GROW, dtype=FLOATS,
       data=st.data())
def test_sum_over_a_dim_grows_with_any_dim(shape, keepdim, grow, dtype, data):
    dim = data.draw(st.integers(0, len(shape) - 1))

    def total(shape):
        return op_cost("aten::sum", [shape, [], [], []], [dtype, "ScalarList", "Scalar", ""],
                       ["", f"[{dim}]", str(keepdim), ""])

    cost = total(shape)
    assert cost.bytes == (numel(shape) + numel(shape) // shape[dim]) * ITEMSIZE_BYTES[dtype]
    axis = data.draw(st.integers(0, len(shape) - 1))
    assert_no_smaller(cost, total([s + grow if i == axis else s for i, s in enumerate(shape)]))


@FAST
@given(batch=st.lists(SIZES, min_size=1, max_size=2), d=SIZES, grow=GROW, dtype=FLOATS)
def test_layer_norm_grows_with_batch_and_width(batch, d, grow, dtype):
    def layer_norm(batch, d):
        return op_cost("aten::layer_norm", [[*batch, d], [], [d], [d], [], []],
                       [dtype, "ScalarList", dtype, dtype, "Scalar", "Scalar"],
                       ["", f"[{d}]", "", "", "1e-05", "True"])

    cost = layer_norm(batch, d)
    assert cost.bytes >= 2 * numel(batch) * d * ITEMSIZE_BYTES[dtype]  # x read, y written at least
    assert_no_smaller(cost, layer_norm([batch[0] + grow, *batch[1:]], d))
    assert_no_smaller(cost, layer_norm(batch, d + grow))
