"""Normalisation costs: layer, RMS, group and batch norm, forward and backward."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernel_advisor.analyze.costs import op_cost
from test_costs_helpers import DTYPE_NAMES, DTYPES, record, recorded, tensor_bytes


def test_native_layer_norm_hand_worked():
    # x [2,64,256] bf16, weight and bias [256]: 128 rows; writes y + fp32 mean/rstd per row
    c = op_cost("aten::native_layer_norm", [[2, 64, 256], [], [256], [256], []],
                ["c10::BFloat16", "ScalarList", "c10::BFloat16", "c10::BFloat16", "Scalar"],
                ["", "[256]", "", "", "1e-05"])
    n = 2 * 64 * 256  # 32768
    assert c.flops == (6 + 2) * n
    assert c.bytes == (n + 256 + 256 + n) * 2 + 2 * 128 * 4


def test_layer_norm_backward_hand_worked():
    # grad_out, input [4,8]; mean, rstd [4,1]; weight, bias [8]; mask all True
    c = op_cost("aten::native_layer_norm_backward",
                [[4, 8], [4, 8], [], [4, 1], [4, 1], [8], [8], []],
                ["float", "float", "ScalarList", "float", "float", "float", "float",
                 "ScalarList"], ["", "", "[8]", "", "", "", "", "[True, True, True]"])
    assert c.flops == (9 + 2 + 1) * 32
    # reads 32 + 32 + 4 + 4 + 8, writes 32 + 8 + 8
    assert c.bytes == (32 + 32 + 4 + 4 + 8 + 32 + 8 + 8) * 4


def test_layer_norm_normalized_shape_must_match():
    assert op_cost("aten::layer_norm", [[4, 8], [], [], [], [], []],
                   ["float", "ScalarList", "", "", "Scalar", "Scalar"],
                   ["", "[7]", "", "", "1e-05", "True"]) is None


def test_rms_norm_hand_worked():
    # _fused_rms_norm [2,3,4] with weight [4]: square-sum 2 + scale 1 + weight 1 = 4/element
    c = op_cost("aten::_fused_rms_norm", [[2, 3, 4], [], [4], []],
                ["float", "ScalarList", "float", ""], ["", "[4]", "", ""])
    assert c.flops == 4 * 24
    assert c.bytes == (24 + 4 + 24 + 6) * 4  # x, w, y, rstd per row


def test_rms_norm_backward():
    c = op_cost("aten::_fused_rms_norm_backward", [[6, 4], [6, 4], [], [6, 1], [4], []],
                ["c10::Half"] * 2 + ["ScalarList", "float", "c10::Half", "ScalarList"],
                ["", "", "[4]", "", "", "[True, True]"])
    assert c.flops == (7 + 2) * 24
    assert c.bytes == (24 + 24 + 4) * 2 + 6 * 4 + (24 + 4) * 2


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 7), (7, 127), (3, 5, 33)])
def test_layer_and_rms_norm_real_calls(dtype, shape):
    x = torch.randn(shape, dtype=dtype)
    w, b = torch.randn(shape[-1], dtype=dtype), torch.randn(shape[-1], dtype=dtype)
    ln = recorded("aten::layer_norm", lambda: F.layer_norm(x, shape[-1:], w, b)).cost()
    assert ln.bytes == tensor_bytes(x, w, b, F.layer_norm(x, shape[-1:], w, b))
    assert ln.compute_dtype == DTYPE_NAMES[dtype]
    rms = recorded("aten::rms_norm", lambda: F.rms_norm(x, shape[-1:], w)).cost()
    assert rms.bytes == tensor_bytes(x, w, F.rms_norm(x, shape[-1:], w))
    native = recorded("aten::native_layer_norm", lambda: torch.native_layer_norm(
        x, shape[-1:], w, b, 1e-5)).cost()
    # mean and rstd are priced as CUDA writes them, in fp32; the CPU kernel used here writes
    # them in the input dtype.
    rows = x.numel() // shape[-1]
    assert native.bytes == tensor_bytes(x, w, b, F.layer_norm(x, shape[-1:], w, b)) + 2 * rows * 4


@pytest.mark.parametrize("shape,groups", [((2, 6, 5, 7), 3), ((1, 4, 127), 2)])
def test_group_norm_real_calls(shape, groups):
    x, w, b = torch.randn(shape), torch.randn(shape[1]), torch.randn(shape[1])
    events = record(lambda: F.group_norm(x, groups, w, b))
    outer = next(e for e in events if e.name == "aten::group_norm").cost()
    assert outer.bytes == tensor_bytes(x, w, b, F.group_norm(x, groups, w, b))
    assert outer.flops == 8 * x.numel()
    native = next(e for e in events if e.name == "aten::native_group_norm").cost()
    # plus fp32 mean and rstd per (sample, group)
    assert native.bytes == outer.bytes + 2 * shape[0] * groups * 4


def test_batch_norm_training_and_eval():
    # x [8,16,4,4] fp32, weight/bias/running stats [16]
    shapes = [[8, 16, 4, 4], [16], [16], [16], [16], [], [], [], []]
    types = ["float"] * 5 + ["Scalar"] * 4
    train = op_cost("aten::batch_norm", shapes, types, [""] * 5 + ["True", "0.1", "1e-05",
                                                                   "True"])
    n = 8 * 16 * 16  # 2048
    assert train.flops == (6 + 2) * n
    # reads x, w, b, rm, rv; writes y and the updated rm, rv
    assert train.bytes == (n + 4 * 16 + n + 2 * 16) * 4
    evaluation = op_cost("aten::batch_norm", shapes, types,
                         [""] * 5 + ["False", "0.1", "1e-05", "True"])
    assert evaluation.flops == 2 * n
    assert evaluation.bytes == (n + 4 * 16 + n) * 4


def test_native_batch_norm_saves_stats_and_backward():
    c = op_cost("aten::native_batch_norm", [[4, 3, 5], [3], [3], [3], [3], [], [], []],
                ["c10::Half"] + ["float"] * 4 + ["Scalar"] * 3,
                [""] * 5 + ["True", "0.1", "1e-05"])
    assert c.bytes == 60 * 2 + 4 * 3 * 4 + 60 * 2 + 2 * 3 * 4 + 2 * 3 * 4
    back = op_cost("aten::native_batch_norm_backward",
                   [[4, 3, 5], [4, 3, 5], [3], [3], [3], [3], [3], [], [], []],
                   ["float"] * 7 + ["Scalar", "Scalar", "ScalarList"],
                   [""] * 7 + ["True", "1e-05", "[True, True, True]"])
    assert back.flops == (9 + 2 + 1) * 60
    # reads grad, x, save_mean, save_invstd, weight; writes grad_x, grad_w, grad_b
    assert back.bytes == (60 + 60 + 3 + 3 + 3 + 60 + 3 + 3) * 4


def test_batch_norm_training_backward_recorded():
    x = torch.randn(4, 3, 5, requires_grad=True)
    w, b = torch.ones(3, requires_grad=True), torch.zeros(3, requires_grad=True)
    events = record(lambda: F.batch_norm(x, None, None, w, b, training=True).sum().backward())
    priced = [e for e in events if "batch_norm" in e.name]
    assert priced and all(e.cost() is not None for e in priced), [e.name for e in priced]
