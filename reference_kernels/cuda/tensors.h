// Tensor-level helpers of the C++ bindings (binding.cpp, backward.cpp, library.cpp): raw
// device pointers of at:: tensors, argument checks, output allocation.
#pragma once

#include <limits>
#include <optional>
#include <vector>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "launchers.h"

namespace ka_torch {

// at::Half / at::BFloat16 share their bit layout with CUDA's __half / __nv_bfloat16.
template <typename T> struct DeviceElem { using type = T; };
template <> struct DeviceElem<at::Half> { using type = __half; };
template <> struct DeviceElem<at::BFloat16> { using type = __nv_bfloat16; };

template <typename scalar_t>
auto* device_ptr(const at::Tensor& t) {
  using D = typename DeviceElem<scalar_t>::type;
  return t.defined() ? reinterpret_cast<D*>(t.data_ptr<scalar_t>()) : static_cast<D*>(nullptr);
}

template <typename scalar_t>
auto* stat_ptr(const at::Tensor& t) {
  using A = ka::acc_t<typename DeviceElem<scalar_t>::type>;
  return t.data_ptr<A>();
}

inline void check_x(const at::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor, got one on ", x.device());
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  TORCH_CHECK(x.is_contiguous(), "x must be contiguous (dense last dim, packed rows), got strides ",
              x.strides());
  TORCH_CHECK(x.size(-1) <= std::numeric_limits<int32_t>::max(), "the last dim of x (",
              x.size(-1), ") must fit in int32");
}

// weight / bias: same device and dtype as x, contiguous, `shape` exactly.
inline void check_param(const std::optional<at::Tensor>& p, const at::Tensor& x, at::IntArrayRef shape,
                 const char* name) {
  if (!p.has_value() || !p->defined()) return;
  TORCH_CHECK(p->device() == x.device(), name, " must be on ", x.device(), ", got ", p->device());
  TORCH_CHECK(p->scalar_type() == x.scalar_type(), name, " dtype ", p->scalar_type(),
              " must match x dtype ", x.scalar_type());
  TORCH_CHECK(p->sizes() == shape, name, " must have shape ", shape, ", got ", p->sizes());
  TORCH_CHECK(p->is_contiguous(), name, " must be contiguous");
}

inline at::Tensor output_like(const at::Tensor& x, const std::optional<at::Tensor>& out) {
  if (!out.has_value() || !out->defined()) return at::empty(x.sizes(), x.options());
  TORCH_CHECK(out->device() == x.device() && out->scalar_type() == x.scalar_type(),
              "out must have x's device and dtype");
  TORCH_CHECK(out->sizes() == x.sizes(), "out must have shape ", x.sizes(), ", got ",
              out->sizes());
  TORCH_CHECK(out->is_contiguous(), "out must be contiguous");
  TORCH_CHECK(out->data_ptr() != x.data_ptr(), "out must not be x (no in-place variant)");
  return *out;
}

// normalized_shape must name the trailing dims of x; returns prod(normalized_shape).
inline int64_t normalized_cols(const at::Tensor& x, at::IntArrayRef normalized_shape) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  TORCH_CHECK(k >= 1 && k <= x.dim(), "normalized_shape ", normalized_shape,
              " must name 1 to ", x.dim(), " trailing dims of x");
  TORCH_CHECK(x.sizes().slice(x.dim() - k) == normalized_shape, "normalized_shape ",
              normalized_shape, " must equal the trailing dims of x ", x.sizes());
  int64_t cols = 1;
  for (const int64_t d : normalized_shape) cols *= d;
  TORCH_CHECK(cols <= std::numeric_limits<int32_t>::max(),
              "the normalized size must be below 2^31, got ", cols);
  return cols;
}

// Rows of a non-empty x viewed as [rows, cols]; the row kernels launch one block per row.
inline int64_t row_count(const at::Tensor& x, int64_t cols) {
  const int64_t rows = x.numel() / cols;
  TORCH_CHECK(rows <= std::numeric_limits<int32_t>::max(), "x has ", rows,
              " rows; at most 2^31 - 1 are supported");
  return rows;
}

// Per-row statistics as native_layer_norm returns them: x's leading dims, then 1 per
// normalized dim, in float (double for fp64 inputs).
inline at::Tensor stat_tensor(const at::Tensor& x, int64_t normalized_dims) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  for (int64_t i = 0; i < normalized_dims; ++i) shape[shape.size() - 1 - i] = 1;
  const auto acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  return at::empty(shape, x.options().dtype(acc));
}

inline void check_activation(int64_t act) {
  TORCH_CHECK(act >= static_cast<int>(ka::Activation::kRelu) &&
                  act <= static_cast<int>(ka::Activation::kSilu),
              "act must be 0 (relu), 1 (gelu erf), 2 (gelu tanh) or 3 (silu), got ", act);
}

// A second input of an element-wise or row op: x's shape, dtype and device, contiguous.
inline void check_like(const at::Tensor& t, const at::Tensor& x, const char* name) {
  TORCH_CHECK(t.device() == x.device() && t.scalar_type() == x.scalar_type(), name,
              " must have x's device and dtype");
  TORCH_CHECK(t.sizes() == x.sizes(), name, " must have shape ", x.sizes(), ", got ", t.sizes());
  TORCH_CHECK(t.is_contiguous(), name, " must be contiguous");
}

// Per-row statistics (float, double for fp64) with x's row count.
inline void check_stat(const at::Tensor& s, const at::Tensor& x, int64_t cols, const char* name) {
  const auto acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  TORCH_CHECK(s.device() == x.device() && s.scalar_type() == acc && s.is_contiguous(), name,
              " must be a contiguous ", acc, " tensor on ", x.device());
  TORCH_CHECK(s.numel() * cols == x.numel(), name, " must hold one value per row of x");
}

}  // namespace ka_torch
