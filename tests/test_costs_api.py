"""The public cost-model API: contract, coverage and the real H200 traces in tests/data."""
from __future__ import annotations

import dataclasses
import gzip
import json
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings, strategies as st
from test_costs_helpers import record

from kernel_advisor.analyze.costs import OpCost, modelled_op_names, op_cost
from kernel_advisor.analyze.costs.copies import DDP_RECORD_FUNCTIONS

DATA = Path(__file__).parent / "data"

REQUIRED = """
mm addmm bmm baddbmm matmul linear conv1d conv2d conv3d conv_transpose1d conv_transpose2d
conv_transpose3d convolution _convolution cudnn_convolution convolution_backward
scaled_dot_product_attention _scaled_dot_product_flash_attention
_scaled_dot_product_efficient_attention _scaled_dot_product_cudnn_attention
_scaled_dot_product_flash_attention_backward _scaled_dot_product_efficient_attention_backward
_scaled_dot_product_cudnn_attention_backward _scaled_dot_product_attention_math
add sub mul div pow rsqrt exp tanh where addcmul clamp add_ mul_ relu gelu silu sigmoid
threshold_backward gelu_backward silu_backward sigmoid_backward tanh_backward softmax
log_softmax _softmax _log_softmax _softmax_backward_data _log_softmax_backward_data layer_norm
native_layer_norm native_layer_norm_backward rms_norm _fused_rms_norm _fused_rms_norm_backward
group_norm native_group_norm native_group_norm_backward batch_norm native_batch_norm
cudnn_batch_norm _batch_norm_impl_index native_batch_norm_backward cudnn_batch_norm_backward
sum mean amax max min var std norm argmax embedding embedding_dense_backward gather index
index_select scatter scatter_add_ index_put_ copy_ clone contiguous to _to_copy cat stack
max_pool1d max_pool2d max_pool3d max_pool2d_with_indices avg_pool1d avg_pool2d avg_pool3d
adaptive_avg_pool2d _adaptive_avg_pool2d adaptive_max_pool2d cross_entropy_loss nll_loss
nll_loss_forward nll_loss_backward mse_loss dropout native_dropout _fused_adam_ _fused_adamw_
_foreach_add_ _foreach_mul_ _foreach_addcmul_ _foreach_lerp_ view reshape transpose t expand
as_strided permute slice select unsqueeze split
""".split()


def test_required_ops_are_modelled():
    missing = [n for n in REQUIRED if f"aten::{n}" not in modelled_op_names()]
    assert not missing


def test_every_registered_name_is_a_real_aten_op():
    unknown = []
    for name in modelled_op_names() - set(DDP_RECORD_FUNCTIONS):
        namespace, op = name.split("::")
        try:
            getattr(getattr(torch.ops, namespace), op)
        except (AttributeError, RuntimeError):
            unknown.append(name)
    assert not unknown


def test_op_cost_is_frozen_and_unknown_is_none():
    c = op_cost("aten::relu", [[4]], ["float32"], [""])
    assert isinstance(c, OpCost)
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.flops = 1.0
    assert op_cost("aten::definitely_not_an_op", [[4]], ["float32"], [""]) is None
    assert op_cost("mylib::custom", [[4]], ["float32"], [""]) is None


@pytest.mark.parametrize("shapes,dtypes,concrete", [
    ("not a list", ["float32"], [""]),
    ([[4, -1]], ["float32"], [""]),
    ([[4]], ["no_such_dtype"], [""]),
    ([], [], []),
    ([[2, 3]], ["float32"], [""]),
])
def test_malformed_arguments_give_none(shapes, dtypes, concrete):
    assert op_cost("aten::mm", shapes, dtypes, concrete) is None


def test_profiler_and_torch_dtype_names_agree():
    profiler = op_cost("aten::mul", [[8, 16], [16]], ["c10::BFloat16", "float"], ["", ""])
    torch_names = op_cost("aten::mul", [[8, 16], [16]], ["bfloat16", "torch.float32"], ["", ""])
    assert profiler == torch_names


def test_missing_concrete_inputs_are_padded():
    # traces without "Concrete Inputs" still price ops that do not need values
    assert op_cost("aten::add", [[3], [3], []], ["float", "float", "Scalar"], []).bytes == 36
    assert op_cost("aten::add", [[3], [3], []], ["float", "float", "Scalar"], None).bytes == 36


def _trace_ops(name: str):
    with gzip.open(DATA / name) as fh:
        events = json.load(fh)["traceEvents"]
    for e in events:
        if e.get("cat") == "cpu_op" and e["name"].startswith("aten::"):
            args = e["args"]
            yield e["name"], args["Input Dims"], args["Input type"], args["Concrete Inputs"]


@pytest.mark.parametrize("trace", ["cuda_gpt_inference.json.gz", "cuda_gpt_train.json.gz",
                                   "cuda_gpt_compiled.json.gz"])
def test_every_aten_op_of_the_h200_traces_is_priced(trace):
    # cat's Tensor[] has no recorded dtype: it is priced at the assumed float32.
    unpriced = {name for name, *args in _trace_ops(trace) if op_cost(name, *args) is None}
    assert not unpriced


def test_einsum_without_its_equation_owns_no_work_and_its_kernels_are_priced():
    # The profiler records neither einsum's equation (a str) nor its Tensor[] dtypes:
    # attribution prices its children instead, and the einsum row keeps zero work (its dispatch).
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    events = record(lambda: torch.einsum("ij,jk->ik", a, b))
    einsum = next(e for e in events if e.name == "aten::einsum")
    assert einsum.concrete[0] == "" and (einsum.cost().flops, einsum.cost().bytes) == (0, 0)
    bmm = [e for e in events if e.name == "aten::bmm"]
    assert bmm and bmm[0].cost().flops == 2 * 3 * 4 * 5


_NAMES = sorted(modelled_op_names())
_SHAPES = st.one_of(st.just([]), st.lists(st.integers(0, 9), max_size=5),
                    st.lists(st.lists(st.integers(0, 5), max_size=3), min_size=1, max_size=3))
_DTYPES = st.sampled_from(["float", "c10::BFloat16", "c10::Half", "long int", "bool", "double",
                           "int", "Scalar", "", "ScalarList", "TensorList"])
_VALUES = st.sampled_from(["", "0", "1", "-1", "2", "6", "15", "True", "False", "[0]", "[]",
                           "[1, 1]", "[2, 2]", "[-1]", "0.5", "[True, True, False]", "-100",
                           "inf", "abc", "[0, 0]"])


@settings(max_examples=300, deadline=None)
@given(name=st.sampled_from(_NAMES), args=st.lists(st.tuples(_SHAPES, _DTYPES, _VALUES),
                                                   max_size=12))
def test_arbitrary_arguments_never_raise(name, args):
    # Any row of any ops.csv must give a cost or None, never crash the analysis.
    c = op_cost(name, [a[0] for a in args], [a[1] for a in args], [a[2] for a in args])
    if c is not None:
        assert c.flops >= 0 and c.bytes >= 0
        assert math.isfinite(c.flops) and math.isfinite(c.bytes)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_mutated_h200_trace_rows_never_raise(data):
    name, shapes, dtypes, concrete = data.draw(st.sampled_from(_H200_ROWS))
    position = data.draw(st.integers(0, max(len(shapes) - 1, 0)))
    shapes, dtypes, concrete = list(shapes), list(dtypes), list(concrete)
    if shapes:
        shapes[position] = data.draw(_SHAPES)
        dtypes[position] = data.draw(_DTYPES)
        concrete[position] = data.draw(_VALUES)
    c = op_cost(name, shapes, dtypes, concrete)
    assert c is None or (c.flops >= 0 and c.bytes >= 0)


_H200_ROWS = sorted({(n, json.dumps(s), json.dumps(d), json.dumps(c))
                     for trace in ("cuda_gpt_train.json.gz", "cuda_gpt_compiled.json.gz")
                     for n, s, d, c in _trace_ops(trace)})
_H200_ROWS = [(n, json.loads(s), json.loads(d), json.loads(c)) for n, s, d, c in _H200_ROWS]
