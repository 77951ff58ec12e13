"""Copies, conversions, concatenation, creation, gathers/scatters and zero-cost views."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernel_advisor.analyze.costs import op_cost
from test_costs_helpers import DTYPES, record, recorded, tensor_bytes


def test_copy_and_clone_from_h200_trace():
    # aten::copy_ [[2,4,64,64],[2,4,64,64],[]]: read src + write dst
    c = op_cost("aten::copy_", [[2, 4, 64, 64], [2, 4, 64, 64], []],
                ["float", "float", "Scalar"], ["", "", "False"])
    assert (c.flops, c.bytes) == (0, 2 * 32768 * 4)
    # a broadcast source is read at its real size: [1, 8] into [5, 8]
    c = op_cost("aten::copy_", [[5, 8], [1, 8], []], ["c10::Half", "float", "Scalar"],
                ["", "", "False"])
    assert c.bytes == 8 * 4 + 40 * 2


def test_to_same_dtype_is_a_no_op_and_cast_is_a_copy():
    # aten::to [[2,64,256],...] ['float', 6 (=float32)] from the H200 trace: returns self
    same = op_cost("aten::to", [[2, 64, 256], [], [], [], []],
                   ["float", "Scalar", "Scalar", "Scalar", ""], ["", "6", "False", "False", ""])
    assert (same.flops, same.bytes) == (0, 0)
    cast = op_cost("aten::to", [[2, 64, 256], [], [], [], []],
                   ["float", "Scalar", "Scalar", "Scalar", ""], ["", "15", "False", "False", ""])
    assert cast.bytes == 32768 * (4 + 2)  # fp32 read, bf16 written


@pytest.mark.parametrize("src,dst", [(torch.float32, torch.bfloat16),
                                     (torch.float16, torch.float32),
                                     (torch.int64, torch.float32)])
def test_recorded_conversions(src, dst):
    x = torch.ones(7, 127, dtype=src)
    event = recorded("aten::_to_copy", lambda: x.to(dst))
    assert event.cost().bytes == tensor_bytes(x, x.to(dst))


def test_reshape_of_transposed_tensor_is_a_copy():
    x = torch.randn(33, 7)
    event = recorded("aten::reshape", lambda: x.t().reshape(-1))
    assert event.cost().bytes == 2 * x.numel() * 4


def test_cat_assumes_float32_when_element_dtypes_are_not_recorded():
    # torch.profiler records Tensor[] shapes but not dtypes: float32 is assumed unless supplied.
    shapes = [[[2, 64, 256]] * 3, []]
    assumed = op_cost("aten::cat", shapes, ["TensorList", "Scalar"], ["", "2"])
    assert assumed.bytes == 2 * 3 * 32768 * 4
    half = op_cost("aten::cat", shapes, ["c10::BFloat16", "Scalar"], ["", "2"])
    assert half.bytes == 2 * 3 * 32768 * 2
    c = op_cost("aten::cat", shapes, ["float32", "Scalar"], ["", "2"])
    assert c.bytes == 2 * 3 * 32768 * 4
    mixed = op_cost("aten::cat", [[[4], [4]], []], [["c10::Half", "float"], "Scalar"],
                    ["", "0"])
    assert mixed.bytes == 4 * 2 + 4 * 4 + 8 * 4  # promoted to fp32 output


def test_creation_and_fill():
    # zeros([3,4], dtype=float16): 12 * 2 bytes written
    assert op_cost("aten::zeros", [[], [], [], [], []],
                   ["ScalarList", "Scalar", "", "", "Scalar"],
                   ["[3, 4]", "5", "", "", "False"]).bytes == 24
    # full((2,2), 3.) without dtype: float32
    assert op_cost("aten::full", [[], [], [], [], [], []],
                   ["ScalarList", "Scalar", "", "", "", "Scalar"],
                   ["[2, 2]", "3.", "", "", "", "False"]).bytes == 16
    assert op_cost("aten::fill_", [[2, 2], []], ["float", "Scalar"], ["", "1."]).bytes == 16
    assert op_cost("aten::empty", [[], [], [], [], [], []],
                   ["ScalarList", "Scalar", "Scalar", "", "", "Scalar"],
                   ["[2, 4, 64, 64]", "6", "0", "", "", "0"]).bytes == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_new_zeros_and_new_full_write_their_size_in_selfs_dtype(dtype):
    x = torch.randn(2, 16, 8, dtype=dtype)
    for fn, name in [(lambda: x.new_zeros((2, 4, 9)), "aten::new_zeros"),
                     (lambda: x.new_full((3, 5), 2.0), "aten::new_full"),
                     (lambda: x.new_zeros((2, 3), dtype=torch.int32), "aten::new_zeros")]:
        assert recorded(name, fn).cost().bytes == tensor_bytes(fn())


@pytest.mark.parametrize("rows,cols,offset", [(3, 3, 1), (4, 7, 0), (7, 4, -2), (5, 5, 9), (6, 3, -9), (1, 1, 0)])
@pytest.mark.parametrize("which", ["triu", "tril"])
def test_triangle_indices_match_torch(rows, cols, offset, which):
    fn = getattr(torch, f"{which}_indices")
    event = recorded(f"aten::{which}_indices", lambda: fn(rows, cols, offset))
    assert event.cost().bytes == tensor_bytes(fn(rows, cols, offset))


def test_triangle_count_hand_worked():
    from kernel_advisor.analyze.costs.copies import triangle_count
    # 3x3 above the diagonal (offset 1): rows hold 2, 1, 0 → 3; on and below (offset 0): 1, 2, 3 → 6
    assert triangle_count(3, 3, 1, upper=True) == 3 and triangle_count(3, 3, 0, upper=False) == 6


@pytest.mark.parametrize("fn,name", [
    (lambda x: F.pad(x, (1, 2, 0, 3)), "aten::constant_pad_nd"),
    (lambda x: x.repeat(2, 1, 3), "aten::repeat"),
    (lambda x: x.flip(0), "aten::flip"),
    (lambda x: x.tril(), "aten::tril"),
    (lambda x: torch.stack([x, x], 1), "aten::stack"),
])
@pytest.mark.parametrize("dtype", DTYPES)
def test_recorded_copies(fn, name, dtype):
    x = torch.randn(7, 33, dtype=dtype)
    event = recorded(name, lambda: fn(x))
    if name == "aten::stack":  # the profiler does not record the list dtype: supply it
        event = type(event)(event.name, event.shapes, [str(dtype)[6:], "Scalar"],
                            event.concrete)
        assert event.cost().bytes == tensor_bytes(x, x, fn(x))
        return
    assert event.cost().bytes == tensor_bytes(x, fn(x))


def test_embedding_reads_only_gathered_rows():
    # embedding(weight [50257, 768], ids [8, 128]) bf16: 1024 rows read and written
    c = op_cost("aten::embedding", [[50257, 768], [8, 128], [], [], []],
                ["c10::BFloat16", "long int", "Scalar", "Scalar", "Scalar"],
                ["", "", "-1", "False", "False"])
    assert c.bytes == 1024 * 8 + 2 * 1024 * 768 * 2
    back = op_cost("aten::embedding_dense_backward", [[8, 128, 768], [8, 128], [], [], []],
                   ["c10::BFloat16", "long int", "Scalar", "Scalar", "Scalar"],
                   ["", "", "50257", "-1", "False"])
    assert back.bytes == 1024 * 768 * 2 + 1024 * 8 + 50257 * 768 * 2
    assert back.flops == 1024 * 768


@pytest.mark.parametrize("dtype", DTYPES)
def test_recorded_gathers(dtype):
    table = torch.randn(10, 4, dtype=dtype)
    ids = torch.tensor([[1, 2], [3, 9]])
    columns = ids % 4
    events = record(lambda: (F.embedding(ids, table), table.index_select(0, ids.flatten()),
                             table.gather(1, columns)))
    by_name = {e.name: e.cost() for e in events}
    emb = F.embedding(ids, table)
    assert by_name["aten::embedding"].bytes == ids.numel() * 8 + 2 * tensor_bytes(emb)
    sel = table.index_select(0, ids.flatten())
    assert by_name["aten::index_select"].bytes == 4 * 8 + 2 * tensor_bytes(sel)
    assert by_name["aten::gather"].bytes == 4 * 8 + 2 * 4 * table.element_size()


def test_scatter_add_and_index_put():
    # scatter_add_(self [4,5], dim 1, index [4,2], src [4,2]): RMW 8 elements + src + index
    c = op_cost("aten::scatter_add_", [[4, 5], [], [4, 2], [4, 2]],
                ["float", "Scalar", "long int", "float"], ["", "1", "", ""])
    assert c.bytes == 8 * 8 + 8 * 4 * 2 + 8 * 4
    assert c.flops == 8
    # out-of-place scatter also copies self: + 2 * 20 * 4
    c = op_cost("aten::scatter", [[4, 5], [], [4, 2], [4, 2]],
                ["float", "Scalar", "long int", "float"], ["", "1", "", ""])
    assert c.bytes == 8 * 8 + 8 * 4 + 8 * 4 + 2 * 20 * 4
    # index_put_ with recorded values [3,4]; a broadcast scalar value is unmodelled
    c = op_cost("aten::index_put_", [[2, 3, 4], [], [3, 4], []],
                ["float", "", "float", "Scalar"], ["", "", "", "False"])
    assert c.bytes == 2 * 12 * 4
    assert op_cost("aten::index_put_", [[2, 3, 4], [], [], []],
                   ["float", "", "float", "Scalar"], ["", "", "", "False"]) is None
    # aten::index: the profiler records no index tensors -> unmodelled
    assert op_cost("aten::index", [[2, 3, 4], []], ["float", ""], ["", ""]) is None
    # with the index list's shapes and dtypes supplied: table[ids [3]] on [10, 4] -> [3, 4]
    c = op_cost("aten::index", [[10, 4], [[3]]], ["float", ["int64"]], ["", ""])
    assert c.bytes == 3 * 8 + 2 * 12 * 4


@pytest.mark.parametrize("name", ["aten::view", "aten::transpose", "aten::as_strided",
                                  "aten::expand", "aten::permute", "aten::slice",
                                  "aten::split", "aten::t", "aten::unsqueeze",
                                  "aten::empty_like", "aten::_unsafe_view"])
def test_views_cost_nothing_but_are_modelled(name):
    c = op_cost(name, [[2, 4, 64, 64], []], ["float", "ScalarList"], ["", "[8, 64, 64]"])
    assert (c.flops, c.bytes) == (0, 0)


def test_views_recorded_in_a_block_are_all_zero():
    x = torch.randn(2, 64, 768)
    events = record(lambda: [t.view(2, 64, 4, 64).transpose(1, 2) for t in x.split(256, -1)])
    views = [e for e in events if e.name in ("aten::split", "aten::narrow", "aten::slice",
                                             "aten::view", "aten::transpose",
                                             "aten::as_strided")]
    assert views and all(e.cost().bytes == 0 for e in views)


def test_to_overloads_that_may_change_device():
    # to.dtype_layout (8 args) / to.device (6 args): the Device argument is recorded as "",
    # so an unchanged dtype is either a no-op or a transfer - unknown; a new dtype is a copy.
    types8 = ["float", "Scalar", "Scalar", "", "", "Scalar", "Scalar", ""]
    same = ["", "6", "0", "", "", "False", "False", ""]
    assert op_cost("aten::to", [[2, 3, 4]] + [[]] * 7, types8, same) is None
    cast = ["", "5", "0", "", "", "False", "False", ""]
    assert op_cost("aten::to", [[2, 3, 4]] + [[]] * 7, types8, cast).bytes == 24 * (4 + 2)
    types6 = ["c10::BFloat16", "", "Scalar", "Scalar", "Scalar", ""]
    assert op_cost("aten::to", [[4, 8]] + [[]] * 5, types6,
                   ["", "", "6", "False", "False", ""]).bytes == 32 * (2 + 4)


def test_to_other_follows_the_other_tensor():
    # to.other(self, other, non_blocking, copy, memory_format): same dtype may be a transfer
    types = ["float", "c10::Half", "Scalar", "Scalar", ""]
    assert op_cost("aten::to", [[4, 8], [2], [], [], []], ["float", "float"] + types[2:],
                   ["", "", "False", "False", ""]) is None
    c = op_cost("aten::to", [[4, 8], [2], [], [], []], types, ["", "", "False", "False", ""])
    assert c.bytes == 32 * (4 + 2)


@pytest.mark.parametrize("dtype,itemsize", [("bfloat16", 2), ("float32", 4)])
def test_ddp_reducer_copies(dtype, itemsize):
    # DDP on 2 x H200 recorded both with the gradient alone: [[8192, 8192]] bf16 is
    # 67,108,864 elements, read once and written once = 268,435,456 bytes in bf16.
    n = 8192 * 8192
    mul = op_cost("torch::distributed::reducer::mul_out", [[8192, 8192]], [dtype], [""])
    assert (mul.flops, mul.bytes) == (n, 2 * n * itemsize)  # one multiply by 1/world_size each
    copy = op_cost("torch.distributed.ddp.reducer::copy_bucket_to_grad", [[8192, 8192]], [dtype], [""])
    assert (copy.flops, copy.bytes) == (0, 2 * n * itemsize)


@pytest.mark.parametrize("name, shapes, types, concrete", [
    ("aten::tril_indices", [[], [], []], ["Scalar"] * 3, ["nan", 3, 0]),  # CI's hypothesis found these
    ("aten::triu_indices", [[], [], []], ["Scalar"] * 3, ["inf", 3, 0]),
    ("aten::triu_indices", [[], [], []], ["Scalar"] * 3, [10**9, 3, 0]),
    ("aten::arange", [[], [], [], [], []], ["Scalar"] * 5, ["inf", "", "", "", ""]),
    ("aten::upsample_nearest2d", [[1, 3, 8, 8], [], []], ["float", "", ""], ["", "", "[nan, 2.0]"]),
])
def test_non_finite_or_impossible_arguments_are_unmodelled_not_errors(name, shapes, types, concrete):
    assert op_cost(name, shapes, types, concrete) is None
