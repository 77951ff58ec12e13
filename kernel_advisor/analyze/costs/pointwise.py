"""The shared model of a pointwise (elementwise) op: broadcast, promote, read once, write once."""
from __future__ import annotations

from dataclasses import dataclass

from kernel_advisor.analyze.costs import dtypes as dt
from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.registry import OpCost, cost, io_cost, read_bytes, register, written
from kernel_advisor.analyze.costs.shapes import Unmodelled, broadcast, numel, wrap_dim

PROMOTE, FLOAT, BOOL, FIRST = "promote", "float", "bool", "first"


@dataclass(frozen=True)
class Pointwise:
    """How one elementwise op reads its arguments.

    operands: positions that may hold a tensor or Scalar operand (they broadcast and take part
        in type promotion); tensors after them are out= buffers and are ignored.
    flops: per output element. NB: every primitive counts 1 whether it is an add or a
        transcendental (exp, erf, tanh: tens of instructions on the SFU/FMA pipes) - the
        usual FLOP-counting convention; composite activations count their primitives.
    result: PROMOTE (torch's result_type), FLOAT (integers promote to float32, e.g. exp),
        BOOL (comparisons), FIRST (the dtype of the first operand, e.g. masked_fill).
    masks: positions of tensors that are read and broadcast but do not promote (where's cond).
    """

    operands: tuple[int, ...]
    flops: float = 1.0
    result: str = PROMOTE
    masks: tuple[int, ...] = ()


def _is_wrapped_number(t: Tensor) -> bool:
    # NB: Python numbers reach ATen as 0-dim CPU tensors of these dtypes; CUDA kernels take
    # them as kernel arguments, so they move no device memory.
    return t.shape == () and t.dtype in ("float64", "int64", "complex128", "bool")


def _result_dtype(call: OpCall, spec: Pointwise, operands: list[Tensor]) -> str:
    """torch's type promotion over the tensor operands and any Scalar operands."""
    scalars = [call.scalar_category(i) for i in spec.operands if call.is_scalar(i)]
    return dt.result_dtype([t.dtype for t in operands if t.shape],
                           [t.dtype for t in operands if not t.shape], scalars)


def pointwise_cost(call: OpCall, spec: Pointwise, inplace: bool) -> OpCost:
    operands = call.tensors(spec.operands)
    if not operands:
        raise Unmodelled(f"{call.name}: no tensor operand recorded")
    masks = call.tensors(spec.masks)
    out_shape = broadcast(*(t.shape for t in operands + masks))
    promoted = _result_dtype(call, spec, operands)
    if spec.result == FLOAT and dt.category(promoted) < 2:
        promoted = "float32"
    if inplace:
        self_ = call.tensor(spec.operands[0])
        if out_shape != self_.shape:
            raise Unmodelled(f"{call.name}: in-place result {out_shape} != self {self_.shape}")
        out_dtype = self_.dtype
    else:
        out_dtype = {BOOL: "bool", FIRST: operands[0].dtype}.get(spec.result, promoted)
    reads = [t for t in operands + masks if not _is_wrapped_number(t)]
    flops = spec.flops * numel(out_shape)
    return io_cost(flops, reads, [written(out_shape, out_dtype)], promoted)


def register_pointwise(names: str, spec: Pointwise, inplace_variants: bool = True) -> None:
    """Register each name (and its in-place `name_` variant) with this spec."""
    for name in names.split():
        register(name)(lambda call, s=spec: pointwise_cost(call, s, inplace=False))
        if inplace_variants:
            register(f"{name}_")(lambda call, s=spec: pointwise_cost(call, s, inplace=True))


# ------------------------------------------------------------
# Elementwise arithmetic, comparisons and selections, with broadcasting and in-place variants.
#
# Bytes: every operand read once at its real (un-broadcast) size, the output written once.
# NB: in-place ops read and write `self`; masked_fill_ therefore counts all of self although
# only masked elements change.

UNARY, BINARY = (0,), (0, 1)

# Same dtype out as in (integers stay integers).
register_pointwise("abs neg negative sign sgn floor ceil round trunc frac bitwise_not square "
                   "nan_to_num", Pointwise(UNARY))
# NB: positive returns its input itself (a view: views.py), no kernel.
# Floating results: integer inputs compute in float32.
register_pointwise("exp exp2 expm1 log log2 log10 log1p sqrt rsqrt sin cos tan asin acos atan "
                   "sinh cosh asinh acosh atanh erf erfc erfinv reciprocal lgamma digamma sinc "
                   "i0 logit", Pointwise(UNARY, result=FLOAT))
register_pointwise("isnan isinf isfinite isposinf isneginf signbit", Pointwise(UNARY, result=BOOL),
                   inplace_variants=False)
register_pointwise("logical_not", Pointwise(UNARY, result=BOOL))

# Binary: (self, other, [alpha | rounding_mode]); `other` may be a Scalar.
# NB: add/sub with alpha != 1 do one more multiply per element: not counted.
register_pointwise("add sub subtract mul multiply fmod remainder copysign floor_divide heaviside "
                   "gcd lcm bitwise_and bitwise_or bitwise_xor bitwise_left_shift "
                   "bitwise_right_shift pow", Pointwise(BINARY))
register_pointwise("rsub maximum minimum fmax fmin __and__ __or__ __xor__ __lshift__ __rshift__",
                   Pointwise(BINARY), inplace_variants=False)
# NB: div with rounding_mode keeps integer dtypes; the profiler does not record the mode, so
# integer division is reported as float32 output.
register_pointwise("div divide true_divide atan2 arctan2 hypot xlogy nextafter float_power",
                   Pointwise(BINARY, result=FLOAT))
register_pointwise("logaddexp logaddexp2", Pointwise(BINARY, result=FLOAT), inplace_variants=False)
register_pointwise("eq ne lt le gt ge greater less greater_equal less_equal not_equal "
                   "logical_and logical_or logical_xor", Pointwise(BINARY, result=BOOL))

# Fused ternary ops count their arithmetic: addcmul = self + value * t1 * t2 (2 flops, NB: the
# value multiply is folded), lerp = self + weight * (end - self) (3 flops).
register_pointwise("addcmul addcdiv", Pointwise((0, 1, 2), flops=2.0))
register_pointwise("lerp", Pointwise((0, 1, 2), flops=3.0))
register_pointwise("clamp clip", Pointwise((0, 1, 2)))
register_pointwise("clamp_min clamp_max", Pointwise(BINARY))
# where(condition, self, other): the bool condition is read but does not promote.
register_pointwise("where", Pointwise((1, 2), masks=(0,)), inplace_variants=False)
# masked_fill(self, mask, value): value is a Scalar or a 0-dim tensor; the result keeps self's dtype.
register_pointwise("masked_fill", Pointwise((0, 2), masks=(1,), result=FIRST))


# ------------------------------------------------------------
# Activations and their backward ops, dropout, glu and prelu.
#
# FLOPs per element count the primitives of each formula (NB: a transcendental counts 1):
# gelu 0.5*x*(1+erf(x/sqrt2)) = 5, silu x*sigmoid(x) = 2, mish x*tanh(softplus(x)) = 3,
# hardswish x*clamp(x+3,0,6)/6 = 4, hardsigmoid = 3, elu/celu = 3, selu = 4, softplus = 3,
# leaky_relu = 2, relu/relu6/hardtanh/threshold = 1.
# Backward: grad * local derivative, e.g. sigmoid_backward g*y*(1-y) = 3, tanh_backward
# g*(1-y*y) = 3, silu_backward g*s*(1+x*(1-s)) with s = sigmoid(x) = 6, gelu_backward
# g*(cdf(x) + x*pdf(x)) = 11, threshold_backward (relu) = 1 select.

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


# ------------------------------------------------------------
# Fused optimizers (_fused_adam_, _fused_adamw_, _fused_sgd_) and _foreach_* ops.
#
# Bytes come from every tensor-list argument: each element read once, and the lists an op
# updates written once more. torch.profiler records the shapes of a Tensor[] but not its
# dtype, so these ops are modelled only when the dtype entry of a list names one dtype (or
# one per element); a bare "TensorList" gives None.
# FLOPs per parameter element (NB: per-tensor scalar work such as bias corrections is left
# out): Adam 13 = m update 3 + v update 4 + sqrt/scale/eps 3 + divide, scale, subtract 3;
# +1 decoupled weight decay (AdamW) or +2 L2 weight decay (Adam), +1 amsgrad max, +1 grad
# unscale. SGD: 2 (scale, subtract) + 2 weight decay + 3 momentum + 2 nesterov.

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
