// Tensor-level forward of the CUDA reference kernels: input checks, output allocation, dtype
// dispatch, the current stream and a launch check after every launch. The kernels and their
// launchers live in the .cu files (launchers.h), which need no torch headers.
//
// Every op takes an optional preallocated `out` so that tests can poison it; out must have x's
// shape, dtype and device, be contiguous and not be x.
#include <optional>
#include <tuple>

#include <ATen/Dispatch.h>

#include "launchers.h"
#include "ops.h"
#include "tensors.h"

namespace ka_torch {

at::Tensor softmax(const at::Tensor& x, bool log, const std::optional<at::Tensor>& out) {
  check_x(x);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = output_like(x, out);
  if (x.numel() == 0) return y;
  const int64_t cols = x.size(-1);
  const int64_t rows = row_count(x, cols);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "ka_softmax", [&] {
    ka::launch_softmax(device_ptr<scalar_t>(x), device_ptr<scalar_t>(y), rows, cols, log,
                       at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> rms_norm(const at::Tensor& x,
                                            at::IntArrayRef normalized_shape,
                                            const std::optional<at::Tensor>& weight, double eps,
                                            const std::optional<at::Tensor>& out) {
  check_x(x);
  const int64_t cols = normalized_cols(x, normalized_shape);
  check_param(weight, x, normalized_shape, "weight");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = output_like(x, out);
  at::Tensor rstd = stat_tensor(x, static_cast<int64_t>(normalized_shape.size()));
  if (x.numel() == 0) return {y, rstd};
  const int64_t rows = row_count(x, cols);
  const at::Tensor w = weight.value_or(at::Tensor());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "ka_rms_norm", [&] {
    ka::launch_rms_norm(device_ptr<scalar_t>(x), device_ptr<scalar_t>(w),
                        device_ptr<scalar_t>(y), stat_ptr<scalar_t>(rstd), rows, cols, eps,
                        at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {y, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm(
    const at::Tensor& x, at::IntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps,
    const std::optional<at::Tensor>& out) {
  check_x(x);
  const int64_t cols = normalized_cols(x, normalized_shape);
  check_param(weight, x, normalized_shape, "weight");
  check_param(bias, x, normalized_shape, "bias");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = output_like(x, out);
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  at::Tensor mean = stat_tensor(x, k);
  at::Tensor rstd = stat_tensor(x, k);
  if (x.numel() == 0) return {y, mean, rstd};
  const int64_t rows = row_count(x, cols);
  const at::Tensor w = weight.value_or(at::Tensor());
  const at::Tensor b = bias.value_or(at::Tensor());
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "ka_layer_norm", [&] {
    ka::launch_layer_norm(device_ptr<scalar_t>(x), device_ptr<scalar_t>(w),
                          device_ptr<scalar_t>(b), device_ptr<scalar_t>(y),
                          stat_ptr<scalar_t>(mean), stat_ptr<scalar_t>(rstd), rows, cols, eps,
                          at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {y, mean, rstd};
}

// h = x + residual, one launch, then the norm of h.
at::Tensor residual_sum(const at::Tensor& x, const at::Tensor& residual) {
  check_x(x);
  check_like(residual, x, "residual");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor h = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return h;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "ka_add", [&] {
    ka::launch_add(device_ptr<scalar_t>(x), device_ptr<scalar_t>(residual),
                   device_ptr<scalar_t>(h), x.numel(), at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return h;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> add_rms_norm(
    const at::Tensor& x, const at::Tensor& residual, at::IntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight, double eps) {
  at::Tensor h = residual_sum(x, residual);
  auto [y, rstd] = rms_norm(h, normalized_shape, weight, eps, std::nullopt);
  return {y, h, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> add_layer_norm(
    const at::Tensor& x, const at::Tensor& residual, at::IntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps) {
  at::Tensor h = residual_sum(x, residual);
  auto [y, mean, rstd] = layer_norm(h, normalized_shape, weight, bias, eps, std::nullopt);
  return {y, h, mean, rstd};
}

at::Tensor bias_act(const at::Tensor& x, const std::optional<at::Tensor>& bias, int64_t act,
                    const std::optional<at::Tensor>& out) {
  check_x(x);
  check_param(bias, x, {x.size(-1)}, "bias");
  check_activation(act);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = output_like(x, out);
  if (x.numel() == 0) return y;
  const bool has_bias = bias.has_value() && bias->defined();
  const auto activation = static_cast<ka::Activation>(act);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "ka_bias_act", [&] {
    if (has_bias) {  // the grid loops over rows: no row limit
      const int64_t cols = x.size(-1);
      ka::launch_bias_act(device_ptr<scalar_t>(x), device_ptr<scalar_t>(*bias),
                          device_ptr<scalar_t>(y), x.numel() / cols, cols, activation,
                          at::cuda::getCurrentCUDAStream());
    } else {  // every element alike: one flat stream, vectorised whatever the last dim
      ka::launch_act(device_ptr<scalar_t>(x), device_ptr<scalar_t>(y), x.numel(), activation,
                     at::cuda::getCurrentCUDAStream());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return y;
}

}  // namespace ka_torch
