"""Matmul-family cost formulas: hand-worked numbers, real recorded calls, FlopCounterMode."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from kernel_advisor.analyze.costs import op_cost
from test_costs_helpers import DTYPE_NAMES, DTYPES, record, recorded, tensor_bytes

SIZES = [(1, 1, 1), (7, 5, 3), (127, 33, 65), (1823, 781, 9)]


@pytest.mark.parametrize("m,k,n", SIZES)
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_mm_hand_worked(m, k, n, dtype):
    size = {"float32": 4, "float16": 2, "bfloat16": 2}[dtype]
    c = op_cost("aten::mm", [[m, k], [k, n]], [dtype, dtype], ["", ""])
    assert c.flops == 2 * m * n * k
    assert c.bytes == (m * k + k * n + m * n) * size
    assert (c.compute_dtype, c.uses_tensor_cores) == (dtype, True)


def test_addmm_from_h200_trace():
    # aten::addmm [[768],[128,256],[256,768],[],[]] from tests/data/cuda_gpt_inference
    c = op_cost("aten::addmm", [[768], [128, 256], [256, 768], [], []],
                ["float", "float", "float", "Scalar", "Scalar"], ["", "", "", "1", "1"])
    assert c.flops == 2 * 128 * 768 * 256  # = 50_331_648
    # bias 768 + A 128*256 + B 256*768 + C 128*768 = 768+32768+196608+98304 = 328448 floats
    assert c.bytes == 328_448 * 4


def test_linear_from_h200_trace():
    # aten::linear [[2,64,256],[768,256],[768]]: M = 2*64 = 128 rows
    c = op_cost("aten::linear", [[2, 64, 256], [768, 256], [768]], ["float"] * 3, [""] * 3)
    assert c.flops == 2 * 128 * 768 * 256
    assert c.bytes == (128 * 256 + 768 * 256 + 768 + 128 * 768) * 4


def test_linear_without_bias_and_1d_input():
    c = op_cost("aten::linear", [[256], [768, 256], []], ["bfloat16", "bfloat16", ""],
                ["", "", ""])
    assert c.flops == 2 * 768 * 256
    assert c.bytes == (256 + 768 * 256 + 768) * 2


def test_mm_out_variant_from_compiled_trace():
    # Inductor calls mm.out: [[128,256],[256,768],[128,768]] - the third tensor is the output.
    c = op_cost("aten::mm", [[128, 256], [256, 768], [128, 768]], ["float"] * 3, [""] * 3)
    assert c.bytes == (128 * 256 + 256 * 768 + 128 * 768) * 4


def test_mm_out_dtype_overload():
    # mm.dtype(self, mat2, out_dtype=float32): bf16 operands, fp32 result (code 6).
    c = op_cost("aten::mm", [[4, 8], [8, 2], []], ["bfloat16", "bfloat16", "Scalar"],
                ["", "", "6"])
    assert c.bytes == (4 * 8 + 8 * 2) * 2 + 4 * 2 * 4  # 96 + 32 = 128


def test_bmm_and_baddbmm():
    c = op_cost("aten::bmm", [[8, 64, 64], [8, 64, 64]], ["float"] * 2, [""] * 2)
    assert c.flops == 8 * 2 * 64 * 64 * 64  # 4_194_304
    assert c.bytes == 3 * 8 * 64 * 64 * 4
    # baddbmm with a broadcast [1, 64, 64] accumulator read once
    c = op_cost("aten::baddbmm", [[1, 64, 64], [8, 64, 32], [8, 32, 64], [], []],
                ["float16"] * 3 + ["Scalar"] * 2, ["", "", "", "1", "1"])
    assert c.flops == 8 * 2 * 64 * 64 * 32
    assert c.bytes == (64 * 64 + 8 * 64 * 32 * 2 + 8 * 64 * 64) * 2


@pytest.mark.parametrize("a,b,batch,out", [
    ([5], [5], 1, []),  # dot: 2*5 = 10 flops
    ([3, 5], [5], 1, [3]),
    ([5], [5, 4], 1, [4]),
    ([2, 3, 5], [5, 4], 2, [2, 3, 4]),
    ([3, 1, 7, 5], [2, 5, 4], 6, [3, 2, 7, 4]),  # batch broadcast 3x1 with 2 -> 6
])
def test_matmul_shapes(a, b, batch, out):
    c = op_cost("aten::matmul", [a, b], ["float32", "float32"], ["", ""])
    m = a[-2] if len(a) > 1 else 1
    n = b[-1] if len(b) > 1 else 1
    assert c.flops == 2 * batch * m * n * a[-1]
    numel = lambda s: int(torch.tensor(s).prod()) if s else 1  # noqa: E731
    assert c.bytes == (numel(a) + numel(b) + numel(out)) * 4


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape_a,shape_b", [((7, 5), (5, 3)), ((2, 1, 9, 4), (3, 4, 6)),
                                             ((127,), (127, 3))])
def test_matmul_bytes_match_real_tensors(dtype, shape_a, shape_b):
    a, b = torch.randn(shape_a, dtype=dtype), torch.randn(shape_b, dtype=dtype)
    event = recorded("aten::matmul", lambda: a @ b)
    assert event.cost().bytes == tensor_bytes(a, b, a @ b)
    assert event.cost().compute_dtype == DTYPE_NAMES[dtype]


def test_mismatched_inner_dims_are_unmodelled():
    assert op_cost("aten::mm", [[3, 4], [5, 6]], ["float"] * 2, ["", ""]) is None
    assert op_cost("aten::matmul", [[3, 4], [5, 6]], ["float"] * 2, ["", ""]) is None


def _leaf_matmul_flops(events) -> float:
    leaves = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm"}
    return sum(e.cost().flops for e in events if e.name in leaves)


def test_flops_equal_flop_counter_mode_forward_and_backward():
    torch.manual_seed(0)
    w1 = torch.randn(33, 17, requires_grad=True)
    b1 = torch.randn(33, requires_grad=True)
    w2 = torch.randn(5, 33, requires_grad=True)
    x = torch.randn(3, 7, 17)
    k = torch.randn(3, 5, 11, requires_grad=True)

    def model():
        h = F.gelu(F.linear(x, w1, b1))  # 3-D input: matmul + bias
        h2 = F.linear(h.reshape(21, 33), w2)  # 2-D input: mm
        y = torch.matmul(h2.reshape(3, 7, 5), k)  # bmm
        y.square().sum().backward()

    with FlopCounterMode(display=False) as counter:
        model()
    events = record(model)
    assert counter.get_total_flops() > 0
    assert _leaf_matmul_flops(events) == counter.get_total_flops()


def test_outer_ops_carry_the_same_flops_as_their_kernels():
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 9, 16), torch.randn(24, 16), torch.randn(24)

    def model():
        return torch.matmul(F.linear(x, w, b), torch.randn(24, 3))

    with FlopCounterMode(display=False) as counter:
        model()
    events = record(model)
    outer = sum(e.cost().flops for e in events if e.name in ("aten::linear", "aten::matmul")
                and e.shapes[0] != [36, 16])
    assert outer == counter.get_total_flops()  # 2*36*24*16 + 2*36*3*24 = 27648 + 5184
    assert outer == 27648 + 5184
