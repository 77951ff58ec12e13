"""The shared model of a pointwise (elementwise) op: broadcast, promote, read once, write once."""
from __future__ import annotations

from dataclasses import dataclass

from kernel_advisor.analyze.costs import dtypes as dt
from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.common import io_cost, written
from kernel_advisor.analyze.costs.registry import OpCost, register
from kernel_advisor.analyze.costs.shapes import Unmodelled, broadcast, numel

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
