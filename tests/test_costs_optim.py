"""Fused optimizer and _foreach_* costs: bytes from every tensor-list argument."""
from __future__ import annotations

import torch

from kernel_advisor.analyze.costs import op_cost
from test_costs_helpers import record

PARAMS = [[3, 5], [7]]  # 15 + 7 = 22 elements


def _adam(name, dtypes, amsgrad="False", decay="0."):
    # (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
    #  weight_decay, eps, amsgrad, maximize, grad_scale, found_inf)
    shapes = [PARAMS, PARAMS, PARAMS, PARAMS, PARAMS if amsgrad == "True" else [],
              [[], []]] + [[]] * 9
    types = dtypes + ["Scalar"] * 7 + ["", ""]
    concrete = [""] * 6 + ["0.001", "0.9", "0.999", decay, "1e-08", amsgrad, "False", "", ""]
    return op_cost(name, shapes, types, concrete)


def test_fused_adam_needs_list_dtypes():
    # torch.profiler writes "TensorList" with no element dtype: unknown, not zero
    assert _adam("aten::_fused_adam_", ["TensorList"] * 6) is None


def test_fused_adam_hand_worked():
    # fp32 params: read p, g, m, v (4 * 22 * 4) + two fp32 steps (8); write p, m, v (3 * 88)
    c = _adam("aten::_fused_adam_", ["float32"] * 6)
    assert c.bytes == 4 * 88 + 8 + 3 * 88
    assert c.flops == 13 * 22
    assert c.compute_dtype == "float32" and not c.uses_tensor_cores


def test_fused_adamw_decay_and_amsgrad():
    c = _adam("aten::_fused_adamw_", ["bfloat16"] * 5 + ["float32"], amsgrad="True",
              decay="0.01")
    # bf16 lists: read p, g, m, v, vmax (5 * 44) + steps 8; write p, m, v, vmax (4 * 44)
    assert c.bytes == 5 * 44 + 8 + 4 * 44
    assert c.flops == (13 + 1 + 1) * 22  # decoupled decay + amsgrad max


def test_foreach_ops():
    # _foreach_add_(self, other, alpha): read both lists, write self
    c = op_cost("aten::_foreach_add_", [PARAMS, PARAMS, []], ["float16", "float16", "Scalar"],
                ["", "", "2"])
    assert (c.flops, c.bytes) == (22, 3 * 22 * 2)
    # _foreach_mul_(self, scalar)
    c = op_cost("aten::_foreach_mul_", [PARAMS, []], ["float32", "Scalar"], ["", "0.5"])
    assert c.bytes == 2 * 22 * 4
    # _foreach_addcmul_(self, t1, t2, value): 2 flops per element, reads 3 lists
    c = op_cost("aten::_foreach_addcmul_", [PARAMS, PARAMS, PARAMS, []], ["float32"] * 3 +
                ["Scalar"], ["", "", "", "1"])
    assert (c.flops, c.bytes) == (44, 4 * 22 * 4)
    # _foreach_lerp_(self, end, weight scalar): 3 flops
    c = op_cost("aten::_foreach_lerp_", [PARAMS, PARAMS, []], ["float32", "float32", "Scalar"],
                ["", "", "0.1"])
    assert (c.flops, c.bytes) == (66, 3 * 22 * 4)
    # _foreach_norm: one 0-dim result per tensor
    c = op_cost("aten::_foreach_norm", [PARAMS, [], []], ["float32", "Scalar", ""],
                ["", "2", ""])
    assert c.bytes == 22 * 4 + 2 * 4


def test_recorded_optimizer_step_lists_are_priced_with_dtypes():
    # Real trace of a fused Adam step: supply the dtype the profiler leaves out.
    params = [torch.randn(3, 5, requires_grad=True), torch.randn(7, requires_grad=True)]
    opt = torch.optim.Adam(params, fused=True)
    for p in params:
        p.grad = torch.randn_like(p)
    event = next(e for e in record(opt.step) if e.name == "aten::_fused_adam_")
    assert event.dtypes[0] == "TensorList"
    assert event.cost() is None
    dtypes = ["float32" if t == "TensorList" else t for t in event.dtypes]
    c = op_cost(event.name, event.shapes, dtypes, event.concrete)
    assert c.bytes == 4 * 88 + 8 + 3 * 88
