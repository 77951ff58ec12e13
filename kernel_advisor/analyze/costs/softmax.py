"""softmax / log_softmax, their ATen kernels and backward ops.

NB: ~5 flops per element forward (max, subtract, exp, sum, divide; log_softmax: log and
subtract instead of divide), 4 backward (softmax: dot(grad, y) 2, subtract, multiply;
log_softmax: exp, multiply-sum, subtract). Bytes read the input once and write the output
once; the usual kernels make two or three passes over the row, which stay in cache only while
a row fits on chip.
"""
from __future__ import annotations

from kernel_advisor.analyze.costs.call import OpCall
from kernel_advisor.analyze.costs.common import io_cost, written
from kernel_advisor.analyze.costs.registry import OpCost, register

FORWARD_FLOPS_PER_ELEMENT = 5.0
BACKWARD_FLOPS_PER_ELEMENT = 4.0


def _forward(call: OpCall, out_dtype: str) -> OpCost:
    x = call.tensor(0)
    return io_cost(FORWARD_FLOPS_PER_ELEMENT * x.numel, [x], [written(x.shape, out_dtype)],
                   out_dtype)


@register("softmax", "log_softmax", "_safe_softmax")
def softmax(call: OpCall) -> OpCost:
    # softmax(self, dim, dtype=None): dtype casts the input before the computation.
    x = call.tensor(0)
    return _forward(call, call.dtype_code_at(2) or x.dtype)


@register("_softmax", "_log_softmax")
def aten_softmax(call: OpCall) -> OpCost:
    # _softmax(self, dim, half_to_float): half/bf16 in, fp32 out when half_to_float.
    x = call.tensor(0)
    upcast = call.bool_at(2, False) and x.dtype in ("float16", "bfloat16")
    return _forward(call, "float32" if upcast else x.dtype)


@register("_softmax_backward_data", "_log_softmax_backward_data")
def softmax_backward(call: OpCall) -> OpCost:
    # (grad_output, output, dim, input_dtype): grad_input has the forward input's dtype.
    grad, y = call.tensor(0), call.tensor(1)
    out_dtype = call.dtype_code_at(3) or grad.dtype
    return io_cost(BACKWARD_FLOPS_PER_ELEMENT * grad.numel, [grad, y],
                   [written(grad.shape, out_dtype)], grad.dtype)
