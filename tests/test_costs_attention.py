"""Attention cost formulas: hand-worked numbers, GQA, causal masking, FlopCounterMode."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from kernel_advisor.analyze.costs import op_cost
from kernel_advisor.analyze.costs.attention import causal_kept_frac
from test_costs_helpers import record

SDPA_TYPES = ["c10::BFloat16"] * 3 + ["", "Scalar", "Scalar", "", "Scalar"]


def _sdpa(q, k, v, causal=False, gqa=False):
    return op_cost("aten::scaled_dot_product_attention", [q, k, v, [], [], [], [], []],
                   SDPA_TYPES, ["", "", "", "", "0.", str(causal), "", str(gqa)])


def test_sdpa_hand_worked():
    # B=2, H=4, S=64, D=32: QK^T 2*B*H*S*S*D + PV 2*B*H*S*S*D = 4*2*4*64*64*32 = 4_194_304
    c = _sdpa([2, 4, 64, 32], [2, 4, 64, 32], [2, 4, 64, 32])
    assert c.flops == 4 * 2 * 4 * 64 * 64 * 32
    assert c.bytes == 4 * (2 * 4 * 64 * 32) * 2  # q, k, v read + out written, bf16
    assert (c.compute_dtype, c.uses_tensor_cores) == ("bfloat16", True)


def test_gqa_counts_per_query_head_and_reads_kv_once():
    # 8 query heads over 2 kv heads: the work is per query head, K/V are read at real size.
    c = _sdpa([1, 8, 16, 64], [1, 2, 16, 64], [1, 2, 16, 64], gqa=True)
    assert c.flops == 4 * 1 * 8 * 16 * 16 * 64  # 524_288
    assert c.bytes == (8 * 16 * 64 * 2 + 2 * 2 * 16 * 64) * 2


@pytest.mark.parametrize("s_q,s_k,expected", [
    (1, 1, 1.0),
    (4, 4, 10 / 16),  # rows keep 1+2+3+4 = 10 of 16
    (2, 5, 3 / 10),  # top-left: rows keep 1 and 2 keys
    (127, 127, 128 / 254),  # S(S+1)/2 / S^2 = (S+1)/(2S)
])
def test_causal_fraction(s_q, s_k, expected):
    assert causal_kept_frac(s_q, s_k) == pytest.approx(expected)


def test_causal_bottom_right_fraction():
    # bottom-right: query i sees keys 0..i+3 of 5 -> 4 + 5 = 9 of 10
    assert causal_kept_frac(2, 5, "bottom_right") == pytest.approx(9 / 10)


def test_causal_sdpa_counts_unmasked_half():
    full = _sdpa([2, 4, 64, 32], [2, 4, 64, 32], [2, 4, 64, 32]).flops
    causal = _sdpa([2, 4, 64, 32], [2, 4, 64, 32], [2, 4, 64, 32], causal=True).flops
    assert causal == full * (64 * 65 / 2) / (64 * 64)


def test_flash_backward_hand_worked():
    # recompute QK^T + dV + dP + dQ + dK = 5 bmm of 2*B*H*S*S*D each; 5*2*1*2*16*16*8
    shapes = [[1, 2, 16, 8]] * 5 + [[1, 2, 16]] + [[]] * 9
    types = ["c10::Half"] * 5 + ["float"] + [""] * 9
    concrete = [""] * 6 + ["", "", "16", "16", "0.", "False", "", "", ""]
    c = op_cost("aten::_scaled_dot_product_flash_attention_backward", shapes, types, concrete)
    assert c.flops == 5 * 2 * 1 * 2 * 16 * 16 * 8
    # reads grad_out, q, k, v, out (5 * 256 half) + lse 32 fp32; writes dq, dk, dv
    assert c.bytes == 8 * 256 * 2 + 32 * 4


def test_flash_forward_writes_logsumexp():
    c = op_cost("aten::_scaled_dot_product_flash_attention",
                [[1, 2, 16, 8]] * 3 + [[]] * 4, ["c10::Half"] * 3 + ["Scalar"] * 3 + [""],
                ["", "", "", "0.", "False", "False", ""])
    assert c.bytes == 4 * 256 * 2 + 1 * 2 * 16 * 4


def test_bshd_flash_forward_layout():
    # _flash_attention_forward takes [B, S, H, D]: same work as [B, H, S, D].
    bshd = op_cost("aten::_flash_attention_forward", [[2, 64, 4, 32]] * 3 + [[]] * 8,
                   ["c10::BFloat16"] * 3 + ["", "", "Scalar", "Scalar", "Scalar", "Scalar",
                                            "Scalar", ""],
                   ["", "", "", "", "", "64", "64", "0.", "False", "False", ""])
    assert bshd.flops == _sdpa([2, 4, 64, 32], [2, 4, 64, 32], [2, 4, 64, 32]).flops


def test_attention_flops_equal_flop_counter_mode():
    # FlopCounterMode counts the math backend's bmms; our formula prices the same call.
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 7, 8), torch.randn(2, 4, 5, 8), torch.randn(2, 4, 5, 6)
    qg, kg, vg = torch.randn(1, 6, 9, 16), torch.randn(1, 2, 11, 16), torch.randn(1, 2, 11, 16)

    def model():
        F.scaled_dot_product_attention(q, k, v)
        F.scaled_dot_product_attention(qg, kg, vg, enable_gqa=True)

    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model()
    events = record(model)
    ours = sum(e.cost().flops for e in events
               if e.name == "aten::scaled_dot_product_attention")
    assert counter.get_total_flops() > 0
    assert ours == counter.get_total_flops()


def test_recorded_cpu_backward_is_priced():
    q = torch.randn(1, 2, 7, 8, requires_grad=True)
    events = record(lambda: F.scaled_dot_product_attention(q, q, q).sum().backward())
    names = {e.name for e in events}
    backward = [e for e in events if e.name.endswith("attention_for_cpu_backward")]
    if not backward:
        pytest.skip(f"this torch build routes CPU SDPA elsewhere: {sorted(names)}")
    assert backward[0].cost().flops == 5 * 2 * 1 * 2 * 7 * 7 * 8


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_fused_attention_ops_are_priced():
    # Whichever fused backend CUDA picks (flash, efficient, cuDNN), the work is the same:
    # 4 * B * H * S * S * D = 4 * 2 * 4 * 128 * 128 * 64 for the forward pass.
    q = torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    events = record(lambda: F.scaled_dot_product_attention(q, q, q).sum().backward())
    fused = [e for e in events if e.name.startswith("aten::_scaled_dot_product_")
             and e.name.endswith("attention")]
    assert fused, sorted({e.name for e in events})
    forward = fused[0].cost()
    assert forward.flops == 4 * 2 * 4 * 128 * 128 * 64
    assert forward.compute_dtype == "bfloat16" and forward.uses_tensor_cores
    backward = [e for e in events if e.name.startswith("aten::_scaled_dot_product_")
                and e.name.endswith("attention_backward")]
    assert backward and backward[0].cost().flops == 2.5 * forward.flops
