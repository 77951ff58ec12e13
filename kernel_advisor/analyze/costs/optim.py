"""Fused optimizers (_fused_adam_, _fused_adamw_, _fused_sgd_) and _foreach_* ops.

Bytes come from every tensor-list argument: each element read once, and the lists an op
updates written once more. torch.profiler records the shapes of a Tensor[] but not its
dtype, so these ops are modelled only when the dtype entry of a list names one dtype (or
one per element); a bare "TensorList" gives None.
FLOPs per parameter element (NB: per-tensor scalar work such as bias corrections is left
out): Adam 13 = m update 3 + v update 4 + sqrt/scale/eps 3 + divide, scale, subtract 3;
+1 decoupled weight decay (AdamW) or +2 L2 weight decay (Adam), +1 amsgrad max, +1 grad
unscale. SGD: 2 (scale, subtract) + 2 weight decay + 3 momentum + 2 nesterov.
"""
from __future__ import annotations

from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.common import cost, read_bytes
from kernel_advisor.analyze.costs.registry import OpCost, register
from kernel_advisor.analyze.costs.shapes import Unmodelled

ADAM_FLOPS, SGD_FLOPS = 13, 2


def _elements(tensors: list[Tensor]) -> int:
    return sum(t.numel for t in tensors)


def _lists(call: OpCall, positions: tuple[int, ...]) -> list[list[Tensor]]:
    return [call.tensor_list(i) if call.is_list_arg(i) else [] for i in positions]


@register("_fused_adam_", "_fused_adamw_")
def fused_adam(call: OpCall) -> OpCost:
    # (params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
    #  weight_decay, eps, amsgrad, maximize, grad_scale, found_inf)
    params, grads, m, v, vmax, steps = _lists(call, (0, 1, 2, 3, 4, 5))
    if not params:
        raise Unmodelled(f"{call.name}: no parameters recorded")
    amsgrad = call.bool_at(11, False)
    unscale = call.has_tensor(13)
    updated = params + m + v + (vmax if amsgrad else []) + (grads if unscale else [])
    scalars = [call.optional_tensor(i) for i in (6, 13, 14)]  # tensor lr, grad_scale, found_inf
    moved = read_bytes(params + grads + m + v + (vmax if amsgrad else []) + steps + scalars) \
        + read_bytes(updated)
    decay = call.float_at(9, 0.0) != 0.0
    per_element = (ADAM_FLOPS + decay * (1 if call.name == "aten::_fused_adamw_" else 2)
                   + amsgrad + unscale)
    return cost(per_element * _elements(params), moved, params[0].dtype)


@register("_fused_sgd_")
def fused_sgd(call: OpCall) -> OpCost:
    # (params, grads, momentum_buffer_list, weight_decay, momentum, lr, dampening, nesterov,
    #  maximize, is_first_step, grad_scale, found_inf)
    params, grads, bufs = _lists(call, (0, 1, 2))
    if not params:
        raise Unmodelled(f"{call.name}: no parameters recorded")
    momentum = call.float_at(4, 0.0) != 0.0
    bufs = bufs if momentum else []
    scalars = [call.optional_tensor(i) for i in (5, 10, 11)]
    moved = read_bytes(params + grads + bufs + scalars) + read_bytes(params + bufs)
    per_element = (SGD_FLOPS + 2 * (call.float_at(3, 0.0) != 0.0) + 3 * momentum
                   + 2 * (momentum and call.bool_at(7, False)))
    return cost(per_element * _elements(params), moved, params[0].dtype)


# _foreach_<op>[_]: the first list is updated in place (trailing "_") or a new list of the
# same shapes is returned. Flops per element of the first list.
_FOREACH_FLOPS = {
    "add": 1, "sub": 1, "mul": 1, "div": 1, "maximum": 1, "minimum": 1, "clamp_min": 1,
    "clamp_max": 1, "pow": 1, "sqrt": 1, "rsqrt": 1, "exp": 1, "log": 1, "neg": 1, "abs": 1,
    "reciprocal": 1, "sigmoid": 1, "sign": 1, "addcmul": 2, "addcdiv": 2, "lerp": 3,
    "copy": 0, "zero": 0,
}


def _foreach(call: OpCall) -> OpCost:
    op = call.name.removeprefix("aten::_foreach_").rstrip("_")
    lists = [call.tensor_list(i) for i in range(call.arg_count()) if call.is_list_arg(i)]
    if not lists:
        raise Unmodelled(f"{call.name}: no tensor list recorded")
    first = lists[0]
    if not first:
        raise Unmodelled(f"{call.name}: empty tensor list")
    plain = call.tensors([i for i in range(1, call.arg_count()) if not call.is_list_arg(i)])
    inputs = lists[1:] if op in ("copy", "zero") else lists  # copy_/zero_ do not read self
    moved = read_bytes([t for group in inputs for t in group] + plain) + read_bytes(first)
    return cost(_FOREACH_FLOPS[op] * _elements(first), moved, first[0].dtype)


for _op in _FOREACH_FLOPS:
    _names = {f"_foreach_{_op}_"} | ({f"_foreach_{_op}"} if _op not in ("copy", "zero") else set())
    register(*sorted(_names))(_foreach)


@register("_foreach_norm")
def foreach_norm(call: OpCall) -> OpCost:
    # _foreach_norm(self, ord, dtype): one 0-dim norm per tensor; 2 flops per element.
    tensors = call.tensor_list(0)
    if not tensors:
        raise Unmodelled(f"{call.name}: empty tensor list")
    out_dtype = call.dtype_code_at(2) or tensors[0].dtype
    moved = read_bytes(tensors) + len(tensors) * Tensor((), out_dtype).bytes
    return cost(2 * _elements(tensors), moved, tensors[0].dtype)
