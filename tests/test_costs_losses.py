"""Loss costs: cross entropy (fused minimum), NLL forward/backward, pointwise losses."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kernel_advisor.analyze.costs import op_cost
from test_costs_helpers import DTYPES, record, recorded, tensor_bytes

CE_TYPES = ["float", "long int", "", "Scalar", "Scalar", "Scalar"]


def test_cross_entropy_hand_worked():
    # logits [4, 10] fp32, int64 targets [4], mean reduction -> scalar loss
    c = op_cost("aten::cross_entropy_loss", [[4, 10], [4], [], [], [], []], CE_TYPES,
                ["", "", "", "1", "-100", "0."])
    assert c.flops == 5 * 40
    assert c.bytes == 40 * 4 + 4 * 8 + 4  # logits once, targets, one fp32 loss


def test_cross_entropy_llm_vocab_is_logits_bound():
    # [8192 tokens, 128256 vocab] bf16: the minimum is one read of the logits
    n, vocab = 8192, 128256
    c = op_cost("aten::cross_entropy_loss", [[n, vocab], [n], [], [], [], []],
                ["c10::BFloat16"] + CE_TYPES[1:], ["", "", "", "1", "-100", "0.1"])
    assert c.bytes == n * vocab * 2 + n * 8 + 2
    assert c.flops == 6 * n * vocab  # label smoothing adds a sum over the row


def test_cross_entropy_reduction_none_and_probabilities():
    c = op_cost("aten::cross_entropy_loss", [[3, 5, 7], [3, 5, 7], [], [], [], []],
                ["float", "float", "", "Scalar", "Scalar", "Scalar"],
                ["", "", "", "0", "-100", "0."])
    # probabilities target is logits-sized; reduction none writes [3, 7]
    assert c.bytes == (105 + 105 + 21) * 4


def test_nll_loss_gathers_one_element_per_row():
    # nll_loss_forward(logp [4,10], target [4]) -> loss + total_weight
    c = op_cost("aten::nll_loss_forward", [[4, 10], [4], [], [], []],
                ["float", "long int", "", "Scalar", "Scalar"], ["", "", "", "1", "-100"])
    assert c.bytes == 4 * 4 + 4 * 8 + 4 + 4
    back = op_cost("aten::nll_loss_backward", [[], [4, 10], [4], [], [], [], []],
                   ["float", "float", "long int", "", "Scalar", "Scalar", "float"],
                   ["", "", "", "", "1", "-100", ""])
    assert back.bytes == 4 + 4 * 8 + 4 + 40 * 4  # grad, target, total_weight; writes [4,10]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,classes", [(1, 7), (127, 33)])
def test_recorded_cross_entropy_outer_op(dtype, rows, classes):
    logits, target = torch.randn(rows, classes, dtype=dtype), torch.randint(0, classes, (rows,))
    loss = F.cross_entropy(logits, target)
    events = record(lambda: F.cross_entropy(logits, target))
    c = next(e for e in events if e.name == "aten::cross_entropy_loss").cost()
    assert c.bytes == tensor_bytes(logits, target, loss)
    # every op inside cross_entropy is priced too
    inner = [e for e in events if e.name in ("aten::log_softmax", "aten::_log_softmax",
                                             "aten::nll_loss_nd", "aten::nll_loss_forward")]
    assert inner and all(e.cost() is not None for e in inner)


@pytest.mark.parametrize("name,fn,flops", [
    ("aten::mse_loss", F.mse_loss, 3), ("aten::smooth_l1_loss", F.smooth_l1_loss, 5),
    ("aten::huber_loss", F.huber_loss, 5),
    ("aten::binary_cross_entropy_with_logits", F.binary_cross_entropy_with_logits, 8),
])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_recorded_pointwise_losses(name, fn, flops, reduction):
    x, y = torch.randn(7, 33), torch.rand(7, 33)
    c = recorded(name, lambda: fn(x, y, reduction=reduction)).cost()
    assert c.bytes == tensor_bytes(x, y, fn(x, y, reduction=reduction))
    assert c.flops == flops * x.numel()


def test_mse_backward_recorded():
    x = torch.randn(5, 6, requires_grad=True)
    y = torch.randn(5, 6)
    events = record(lambda: F.mse_loss(x, y).backward())
    back = next(e for e in events if e.name == "aten::mse_loss_backward").cost()
    assert back.bytes == 4 + 30 * 4 * 3  # scalar grad, x, target read; grad_x written
