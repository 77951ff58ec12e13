// The activations of bias_act.cu and pointwise.cu, and their derivatives, in the
// accumulation type. Included only by nvcc.
#pragma once

#include "device_math.h"
#include "launchers.h"

namespace ka {

// act(v) in the accumulation type. fp32/fp64 use the textbook formulas with the accurate
// library functions. NB: for fp16/bf16 outputs, silu and gelu-tanh use
// v / (1 + exp2(-k * log2e)) with ex2 (2 ulp) and __fdividef (2 ulp), since
// 0.5 * (1 + tanh(u)) == 1 / (1 + exp(-2u)) exactly: ~1e-6 relative, far under half an ulp
// of fp16 (2.4e-4) or bf16 (2e-3), at a fraction of tanhf/expf + IEEE division's cost,
// which a 16-bit stream (two elements per 4 bytes) cannot afford at DRAM speed; gelu (erf)
// uses normal_cdf_fast (device_math.h) for the same reason.
template <Activation kAct, bool kFast16, typename A>
__device__ __forceinline__ A activate(A v) {
  constexpr A kSqrt1_2 = static_cast<A>(0.70710678118654752440);   // 1 / sqrt(2)
  constexpr A kSqrt2OverPi = static_cast<A>(0.79788456080286535588);  // sqrt(2 / pi)
  constexpr A kCubic = static_cast<A>(0.044715);
  if constexpr (kAct == Activation::kRelu) {
    return v < static_cast<A>(0) ? static_cast<A>(0) : v;  // NaN stays NaN
  } else if constexpr (kAct == Activation::kGeluErf) {
    if constexpr (kFast16) {
      // |gelu| < 6e-9 below -6: v * 0 gives -0 there (and NaN for -inf), as eager does.
      // Both sides computed, then one select: a branch here cost BSSY/BSYNC per element.
      const A g = v * normal_cdf_fast(v);
      return v < -6.0f ? v * 0.0f : g;
    } else {
      return static_cast<A>(0.5) * v * (static_cast<A>(1) + erf_acc(v * kSqrt1_2));
    }
  } else if constexpr (kAct == Activation::kGeluTanh) {
    const A u = kSqrt2OverPi * (v + kCubic * v * v * v);
    if constexpr (kFast16) {
      return fast_div(v, 1.0f + exp2_ftz(-2.0f * kLog2e * u));
    } else {
      return static_cast<A>(0.5) * v * (static_cast<A>(1) + tanh_acc(u));
    }
  } else {  // silu
    if constexpr (kFast16) {
      return fast_div(v, 1.0f + exp2_ftz(-kLog2e * v));
    } else {
      return v / (static_cast<A>(1) + exp_acc(-v));  // exp overflows to inf: v / inf = -0
    }
  }
}

// d act(v) / dv in the accumulation type, with the library functions (the backward reads two
// streams and writes one, so it has the arithmetic headroom the forward's fast paths buy).
template <Activation kAct, typename A>
__device__ __forceinline__ A activate_grad(A v) {
  constexpr A kSqrt1_2 = static_cast<A>(0.70710678118654752440);
  constexpr A kInvSqrt2Pi = static_cast<A>(0.39894228040143267794);  // 1 / sqrt(2 pi)
  constexpr A kSqrt2OverPi = static_cast<A>(0.79788456080286535588);
  constexpr A kCubic = static_cast<A>(0.044715);
  constexpr A kHalf = static_cast<A>(0.5);
  constexpr A kOne = static_cast<A>(1);
  if constexpr (kAct == Activation::kRelu) {
    return v > static_cast<A>(0) ? kOne : static_cast<A>(0);
  } else if constexpr (kAct == Activation::kGeluErf) {
    // Phi(v) + v * phi(v)
    return kHalf * (kOne + erf_acc(v * kSqrt1_2)) + v * kInvSqrt2Pi * exp_acc(-kHalf * v * v);
  } else if constexpr (kAct == Activation::kGeluTanh) {
    const A u = kSqrt2OverPi * (v + kCubic * v * v * v);
    const A t = tanh_acc(u);
    const A du = kSqrt2OverPi * (kOne + static_cast<A>(3) * kCubic * v * v);
    return kHalf * (kOne + t) + kHalf * v * (kOne - t * t) * du;
  } else {  // silu: s * (1 + v * (1 - s)), s = sigmoid(v)
    const A s = kOne / (kOne + exp_acc(-v));
    return s * (kOne + v * (kOne - s));
  }
}

}  // namespace ka
