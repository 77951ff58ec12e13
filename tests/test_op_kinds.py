"""Op kinds from torch's own metadata (analyze/op_kinds.py): Tag.pointwise, Tag.reduction,
OpOverload.is_view; the exceptions stay few, needed and true; the hand-kept lists they
replaced keep their kinds."""
from __future__ import annotations

import pytest
import torch

from kernel_advisor.analyze import op_kinds
from kernel_advisor.analyze.costs import op_cost
from kernel_advisor.recommend import patterns, shapes

ATEN = sorted({s.name.split("::", 1)[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::")})

# The hand-kept lists this replaced (recommend/shapes.py, recommend/patterns.py,
# analyze/costs/rearrange.py before the tags): every op keeps its kind.
OLD_REDUCTIONS = """mean sum amax amin max min var std var_mean std_mean norm logsumexp prod
linalg_vector_norm any all argmax argmin""".split()
OLD_ELEMENTWISE = """add sub rsub mul div pow rsqrt sqrt exp exp2 expm1 log log1p log2 tanh sigmoid relu
gelu silu mish neg abs clamp clamp_min clamp_max where masked_fill erf sin cos reciprocal square maximum
minimum hardtanh leaky_relu elu softplus hardswish hardsigmoid lerp addcmul addcdiv fill zero copy to
_to_copy type_as clone contiguous dropout native_dropout feature_dropout floor ceil round sign logical_not
eq ne lt le gt ge bitwise_not threshold gelu_backward threshold_backward silu_backward tanh_backward
sigmoid_backward softmax _softmax _safe_softmax log_softmax _log_softmax layer_norm native_layer_norm
rms_norm _fused_rms_norm group_norm native_group_norm batch_norm _softmax_backward_data
_log_softmax_backward_data triu tril""".split()
OLD_PATTERN_VIEWS = """view reshape transpose t permute expand expand_as as_strided _unsafe_view slice narrow
select split split_with_sizes chunk unbind unsqueeze squeeze detach alias flatten unflatten _reshape_alias
view_as numpy_T lift_fresh result_type empty empty_like empty_strided resolve_conj resolve_neg size
stride""".split()
OLD_COST_VIEWS = """view _unsafe_view _reshape_alias view_as expand expand_as as_strided as_strided_ transpose
transpose_ t t_ permute slice select narrow unsqueeze unsqueeze_ squeeze squeeze_ split split_with_sizes
unsafe_split unsafe_split_with_sizes chunk unsafe_chunk tensor_split unbind unflatten movedim moveaxis
swapaxes swapdims diagonal unfold alias detach detach_ lift_fresh view_as_real view_as_complex real imag
numpy_T mT mH matrix_H adjoint _conj conj _neg_view resolve_conj resolve_neg hsplit vsplit dsplit""".split()


@pytest.mark.parametrize("op", OLD_REDUCTIONS)
def test_old_reductions_are_tagged_reductions(op):
    assert op_kinds.is_reduction(op)


@pytest.mark.parametrize("op", OLD_ELEMENTWISE)
def test_old_elementwise_ops_keep_their_shape(op):
    assert shapes.is_elementwise(op) and shapes.is_fusible(f"aten::{op}")


@pytest.mark.parametrize("op", OLD_PATTERN_VIEWS)
def test_old_pattern_views_still_leave_the_op_stream(op):
    assert patterns._moves_no_data(op)


@pytest.mark.parametrize("op", OLD_COST_VIEWS)
def test_old_cost_views_still_cost_nothing(op):
    assert op_kinds.is_view(op)
    cost = op_cost(f"aten::{op}", [[4, 8]], ["float32"], [""])
    assert cost is not None and (cost.flops, cost.bytes) == (0, 0)


def test_tags_decide():
    assert op_kinds.is_pointwise("add") and op_kinds.is_pointwise("add_") and op_kinds.is_pointwise("special_i0e")
    assert op_kinds.is_reduction("nansum") and not op_kinds.is_reduction("add")
    assert op_kinds.is_reduction("max") and not op_kinds.is_pointwise("max")  # max.dim and max.other
    assert op_kinds.is_view("transpose") and op_kinds.is_view("transpose_") and op_kinds.is_view("swapaxes_")
    assert not op_kinds.is_view("mm") and not op_kinds.is_view("view_copy")  # Tag.view_copy: a copy
    for op in ("no_such_op", "copy"):  # copy.t (a list copy) aliases; copy.default does not
        assert not op_kinds.is_view(op) and not op_kinds.is_pointwise("no_such_op")


def test_view_op_names_is_every_view():
    assert op_kinds.view_op_names() == frozenset(n for n in ATEN if op_kinds.is_view(n))
    assert op_kinds.view_op_names() >= set(OLD_COST_VIEWS)


@pytest.mark.parametrize("op", sorted(op_kinds.MAY_COPY))
def test_may_copy_exceptions_are_needed(op):
    # torch's schema says "may alias": without the exception the op would count as a view
    assert any(o.is_view for o in op_kinds._overloads(op)) and not op_kinds.is_view(op)


@pytest.mark.parametrize("op", sorted(op_kinds.UNSAFE_VIEWS))
def test_unsafe_view_exceptions_are_needed(op):
    assert op_kinds._overloads(op) and not any(o.is_view for o in op_kinds._overloads(op))


def test_may_copy_ops_do_copy_and_unsafe_views_do_not():
    x = torch.arange(12.0).reshape(3, 4).t()  # not contiguous
    for y in (x.reshape(12), x.flatten(), x.contiguous(), x.to(torch.float64)):
        assert y.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    z = torch.ops.aten._unsafe_view(torch.arange(6.0), [2, 3])
    assert z._base is None  # no view tracking, yet ...
    base = torch.arange(6.0)
    assert torch.ops.aten._unsafe_view(base, [2, 3]).data_ptr() == base.data_ptr()  # ... the same memory


@pytest.mark.parametrize("op", sorted(shapes.SHAPE_KEEPING))
def test_shape_keeping_exceptions_are_aten_ops_torch_does_not_tag(op):
    assert op_kinds._overloads(op), f"aten::{op} is not an op a trace can name"
    assert not op_kinds.is_pointwise(op) and shapes.is_elementwise(op)


def test_a_pointwise_tag_on_an_op_returning_no_tensor_gives_no_kind():
    equal = [getattr(torch.ops.aten.equal, n) for n in torch.ops.aten.equal.overloads()]
    assert any(torch.Tag.pointwise in o.tags for o in equal)  # returns one bool, not a tensor
    assert not op_kinds.is_pointwise("equal") and not shapes.is_elementwise("equal")


def test_shape_keeping_ops_keep_the_shape():
    x = torch.randn(2, 3, 4)
    for op in ("_softmax", "_log_softmax"):
        assert getattr(torch.ops.aten, op)(x, -1, False).shape == x.shape
    assert torch.ops.aten.native_layer_norm(x, [4], None, None, 1e-5)[0].shape == x.shape
    assert torch.ops.aten.hardswish(x).shape == x.shape and torch.ops.aten.triu(x).shape == x.shape


def test_positive_is_a_view_and_costs_nothing():
    x = torch.ones(3)
    assert torch.positive(x) is x
    assert (op_cost("aten::positive", [[1024]], ["float32"], [""]).bytes) == 0


def test_newly_tagged_ops_link_in_chains():
    # aten::abs was elementwise before; aten::isnan (Tag.pointwise) is now too: its output,
    # the size of its input, links it to the op that reads it.
    producer = ("aten::isnan", [[8, 16]], ["float32"])
    consumer = ("aten::logical_not", [[8, 16]], ["bool"])
    assert shapes.output_numel(*producer) == 128 and shapes.link_bytes(producer, consumer) == 128
