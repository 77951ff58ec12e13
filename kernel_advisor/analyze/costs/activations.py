"""Activations and their backward ops, dropout, glu and prelu.

FLOPs per element count the primitives of each formula (NB: a transcendental counts 1):
gelu 0.5*x*(1+erf(x/sqrt2)) = 5, silu x*sigmoid(x) = 2, mish x*tanh(softplus(x)) = 3,
hardswish x*clamp(x+3,0,6)/6 = 4, hardsigmoid = 3, elu/celu = 3, selu = 4, softplus = 3,
leaky_relu = 2, relu/relu6/hardtanh/threshold = 1.
Backward: grad * local derivative, e.g. sigmoid_backward g*y*(1-y) = 3, tanh_backward
g*(1-y*y) = 3, silu_backward g*s*(1+x*(1-s)) with s = sigmoid(x) = 6, gelu_backward
g*(cdf(x) + x*pdf(x)) = 11, threshold_backward (relu) = 1 select.
"""
from __future__ import annotations

from kernel_advisor.analyze.costs.call import OpCall
from kernel_advisor.analyze.costs.common import io_cost, written
from kernel_advisor.analyze.costs.pointwise import FLOAT, PROMOTE, Pointwise, register_pointwise
from kernel_advisor.analyze.costs.registry import OpCost, register
from kernel_advisor.analyze.costs.shapes import Unmodelled, numel, wrap_dim

_FORWARD = (
    ("relu relu6 hardtanh threshold", 1.0, PROMOTE),
    ("leaky_relu", 2.0, PROMOTE),
    ("sigmoid tanh", 1.0, FLOAT),
    ("silu", 2.0, FLOAT),
    ("mish elu celu hardsigmoid", 3.0, FLOAT),
    ("selu hardswish", 4.0, FLOAT),
    ("gelu", 5.0, FLOAT),
)
for _names, _flops, _result in _FORWARD:
    register_pointwise(_names, Pointwise((0,), flops=_flops, result=_result))
register_pointwise("softplus", Pointwise((0,), flops=3.0, result=FLOAT), inplace_variants=False)
# log_sigmoid = -softplus(-x): 3 as softplus (exp, add, log) plus the negations' 1.
# NB: log_sigmoid_forward's second output (a buffer, empty on CUDA) is not counted.
# rrelu: a leaky relu whose slope is drawn per element in training. NB: the random draw is not counted.
register_pointwise("rrelu", Pointwise((0,), flops=2.0, result=FLOAT))
register_pointwise("log_sigmoid log_sigmoid_forward", Pointwise((0,), flops=4.0, result=FLOAT),
                   inplace_variants=False)

# Backward ops: (grad_output, input-or-output, ...scalars). No in-place variants exist.
_BACKWARD = {
    "threshold_backward": 1.0,
    "hardtanh_backward leaky_relu_backward hardsigmoid_backward": 2.0,
    "sigmoid_backward tanh_backward": 3.0,
    "softplus_backward hardswish_backward": 4.0,
    "silu_backward": 6.0,
    "mish_backward": 8.0,
    "gelu_backward": 11.0,
}
for _names, _flops in _BACKWARD.items():
    register_pointwise(_names, Pointwise((0, 1), flops=_flops), inplace_variants=False)
# log_sigmoid_backward(grad_output, self, buffer); _prelu_kernel_backward(grad_output, self,
# weight) -> (grad_input, grad_weight). NB: only grad_input's write is counted; grad_weight is
# self-shaped until autograd reduces it to the weight's shape (a separate sum).
register_pointwise("log_sigmoid_backward", Pointwise((0, 1), flops=4.0), inplace_variants=False)
register_pointwise("_prelu_kernel_backward", Pointwise((0, 1, 2), flops=3.0), inplace_variants=False)
# elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result)
register_pointwise("elu_backward", Pointwise((0, 5), flops=3.0), inplace_variants=False)


@register("dropout", "feature_dropout", "alpha_dropout")
def dropout(call: OpCall) -> OpCost:
    # dropout(input, p, train): in eval mode or with p == 0 it returns its input, no kernel.
    # NB: 2 flops per element (keep test, scale); the Philox random numbers are not counted.
    x = call.tensor(0)
    if not call.bool_at(2) or call.float_at(1) == 0.0:
        return io_cost(0, [], [], x.dtype)
    return io_cost(2 * x.numel, [x], [written(x.shape, x.dtype)], x.dtype)


@register("native_dropout")
def native_dropout(call: OpCall) -> OpCost:
    # native_dropout(input, p, train) -> (output, bool mask): both written.
    x = call.tensor(0)
    outs = [written(x.shape, x.dtype), written(x.shape, "bool")]
    return io_cost(2 * x.numel, [x], outs, x.dtype)


@register("native_dropout_backward")
def native_dropout_backward(call: OpCall) -> OpCost:
    # native_dropout_backward(grad_output, mask, scale) = grad * mask * scale
    grad, mask = call.tensor(0), call.tensor(1)
    return io_cost(2 * grad.numel, [grad, mask], [written(grad.shape, grad.dtype)], grad.dtype)


@register("glu")
def glu(call: OpCall) -> OpCost:
    # glu(self, dim) = a * sigmoid(b) over the two halves of `dim`: 2 flops per output.
    x = call.tensor(0)
    if not x.shape:
        raise Unmodelled(f"{call.name}: glu needs at least one dim")
    dim = wrap_dim(call.int_at(1, -1), len(x.shape))
    if x.shape[dim] % 2:
        raise Unmodelled(f"{call.name}: dim {dim} of {x.shape} is odd")
    out = x.shape[:dim] + (x.shape[dim] // 2,) + x.shape[dim + 1:]
    return io_cost(2 * numel(out), [x], [written(out, x.dtype)], x.dtype)


@register("glu_backward")
def glu_backward(call: OpCall) -> OpCost:
    # glu_backward(grad_output, self, dim): ~5 flops per output of the forward (sigmoid,
    # products for both halves).
    grad, x = call.tensor(0), call.tensor(1)
    return io_cost(5 * grad.numel, [grad, x], [written(x.shape, x.dtype)], x.dtype)


@register("prelu", "_prelu_kernel")
def prelu(call: OpCall) -> OpCost:
    # prelu(self, weight): weight has one value per channel (dim 1) or a single value.
    x, w = call.tensor(0), call.tensor(1)
    return io_cost(2 * x.numel, [x, w], [written(x.shape, x.dtype)], x.dtype)
