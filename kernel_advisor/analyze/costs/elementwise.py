"""Elementwise arithmetic, comparisons and selections, with broadcasting and in-place variants.

Bytes: every operand read once at its real (un-broadcast) size, the output written once.
NB: in-place ops read and write `self`; masked_fill_ therefore counts all of self although
only masked elements change.
"""
from __future__ import annotations

from kernel_advisor.analyze.costs.pointwise import (BOOL, FIRST, FLOAT, Pointwise,
                                                    register_pointwise)

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
