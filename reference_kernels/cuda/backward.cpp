// Tensor-level backward of the CUDA reference kernels (backward.cu, pointwise.cu), and SwiGLU's
// forward: checks, allocation, dtype dispatch, launch on the current stream, launch check.
#include <tuple>

#include <ATen/Dispatch.h>

#include "launchers.h"
#include "ops.h"
#include "tensors.h"

namespace ka_torch {
namespace {

#define KA_DISPATCH(x, name, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, (x).scalar_type(), name, __VA_ARGS__)

at::Tensor no_grad_tensor(const at::Tensor& x) { return at::empty({0}, x.options()); }

at::Tensor param_like(const at::Tensor& x, at::IntArrayRef normalized_shape) {
  return at::empty(normalized_shape, x.options());
}

// The parameter gradients of a norm: float partials per row chunk (dweight's, then dbias's,
// in one workspace; none with a single chunk), summed into dweight (and dbias when asked).
template <typename scalar_t>
void norm_param_grads(const at::Tensor& x, const at::Tensor& dy, const at::Tensor& mean,
                      const at::Tensor& rstd, at::Tensor& dweight, at::Tensor* dbias,
                      int64_t rows, int64_t cols) {
  using acc = ka::acc_t<typename DeviceElem<scalar_t>::type>;
  const int64_t chunks = ka::norm_param_chunks(rows, cols);
  at::Tensor partials;
  acc* dw_partial = nullptr;
  acc* db_partial = nullptr;
  if (chunks > 1) {
    partials = at::empty({dbias != nullptr ? 2 : 1, chunks, cols}, rstd.options());
    dw_partial = stat_ptr<scalar_t>(partials);
    if (dbias != nullptr) db_partial = dw_partial + chunks * cols;
  }
  ka::launch_norm_backward_params(
      device_ptr<scalar_t>(x), device_ptr<scalar_t>(dy),
      mean.defined() ? stat_ptr<scalar_t>(mean) : nullptr, stat_ptr<scalar_t>(rstd), dw_partial,
      db_partial, device_ptr<scalar_t>(dweight),
      dbias != nullptr ? device_ptr<scalar_t>(*dbias) : nullptr, rows, cols,
      at::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

// The fused backward (norm_backward.cu) where it takes the rows: dx, dweight and dbias from
// one read of x and dy; false (nothing launched) where the rows are too long for it.
template <typename scalar_t>
bool fused_norm_backward(const at::Tensor& x, const at::Tensor& dy, const at::Tensor& w,
                         const at::Tensor& mean, const at::Tensor& rstd, const at::Tensor& addend,
                         at::Tensor& dx, at::Tensor* dweight, at::Tensor* dbias, int64_t rows,
                         int64_t cols) {
  using acc = ka::acc_t<typename DeviceElem<scalar_t>::type>;
  const int64_t blocks = ka::norm_backward_fused_blocks(
      device_ptr<scalar_t>(x), device_ptr<scalar_t>(dy), device_ptr<scalar_t>(w),
      device_ptr<scalar_t>(addend), device_ptr<scalar_t>(dx), rows, cols, dbias != nullptr);
  if (blocks == 0) return false;
  const int64_t n_grads = (dweight != nullptr) + (dbias != nullptr);
  at::Tensor partials;  // dweight's partial rows, then dbias's; none with a single block
  acc* dw_partial = nullptr;
  acc* db_partial = nullptr;
  if (blocks > 1 && n_grads > 0) {
    partials = at::empty({n_grads, blocks, cols}, rstd.options());
    acc* base = stat_ptr<scalar_t>(partials);
    if (dweight != nullptr) dw_partial = base;
    if (dbias != nullptr) db_partial = base + (n_grads - 1) * blocks * cols;
  }
  ka::launch_norm_backward_fused(
      device_ptr<scalar_t>(x), device_ptr<scalar_t>(dy), device_ptr<scalar_t>(w),
      mean.defined() ? stat_ptr<scalar_t>(mean) : nullptr, stat_ptr<scalar_t>(rstd),
      device_ptr<scalar_t>(addend), device_ptr<scalar_t>(dx), dw_partial, db_partial,
      dweight != nullptr ? device_ptr<scalar_t>(*dweight) : nullptr,
      dbias != nullptr ? device_ptr<scalar_t>(*dbias) : nullptr, rows, cols, blocks,
      at::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

// dx, dweight, dbias of rms_norm (mean undefined) or layer_norm.
std::tuple<at::Tensor, at::Tensor, at::Tensor> norm_backward(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, at::IntArrayRef normalized_shape, bool weight_grad,
    bool bias_grad, const std::optional<at::Tensor>& dh) {
  check_x(x);
  const int64_t cols = normalized_cols(x, normalized_shape);
  check_like(dy, x, "dy");
  const at::Tensor addend = dh.has_value() && dh->defined() ? *dh : at::Tensor();
  if (addend.defined()) check_like(addend, x, "dh");
  check_param(weight, x, normalized_shape, "weight");
  check_stat(rstd, x, cols, "rstd");
  if (mean.defined()) check_stat(mean, x, cols, "mean");
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor dx = at::empty(x.sizes(), x.options());
  at::Tensor dweight = weight_grad ? param_like(x, normalized_shape) : no_grad_tensor(x);
  at::Tensor dbias = bias_grad ? param_like(x, normalized_shape) : no_grad_tensor(x);
  if (x.numel() == 0) {
    if (weight_grad) dweight.zero_();
    if (bias_grad) dbias.zero_();
    return {dx, dweight, dbias};
  }
  const int64_t rows = row_count(x, cols);
  const at::Tensor w = weight.has_value() ? *weight : at::Tensor();
  KA_DISPATCH(x, "ka_norm_backward", [&] {
    if (fused_norm_backward<scalar_t>(x, dy, w, mean, rstd, addend, dx,
                                      weight_grad ? &dweight : nullptr,
                                      bias_grad ? &dbias : nullptr, rows, cols)) {
      return;
    }
    ka::launch_norm_backward_dx(device_ptr<scalar_t>(x), device_ptr<scalar_t>(dy),
                                device_ptr<scalar_t>(w),
                                mean.defined() ? stat_ptr<scalar_t>(mean) : nullptr,
                                stat_ptr<scalar_t>(rstd), device_ptr<scalar_t>(addend),
                                device_ptr<scalar_t>(dx), rows, cols,
                                at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    if (weight_grad) {
      norm_param_grads<scalar_t>(x, dy, mean, rstd, dweight, bias_grad ? &dbias : nullptr, rows,
                                 cols);
    } else if (bias_grad) {
      // NB: rare (a bias without a trainable weight): dbias = sum of dy over rows.
      dbias.copy_(dy.reshape({rows, cols}).to(rstd.scalar_type()).sum(at::IntArrayRef{0}).view(normalized_shape));
    }
  });
  return {dx, dweight, dbias};
}

}  // namespace

at::Tensor softmax_backward(const at::Tensor& dy, const at::Tensor& y, bool log) {
  check_x(y);
  check_like(dy, y, "dy");
  const c10::cuda::CUDAGuard guard(y.device());
  at::Tensor dx = at::empty(y.sizes(), y.options());
  if (y.numel() == 0) return dx;
  const int64_t cols = y.size(-1);
  const int64_t rows = row_count(y, cols);
  KA_DISPATCH(y, "ka_softmax_backward", [&] {
    ka::launch_softmax_backward(device_ptr<scalar_t>(y), device_ptr<scalar_t>(dy),
                                device_ptr<scalar_t>(dx), rows, cols, log,
                                at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return dx;
}

std::tuple<at::Tensor, at::Tensor> rms_norm_backward(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, at::IntArrayRef normalized_shape, bool weight_grad,
    const std::optional<at::Tensor>& dh) {
  auto [dx, dweight, dbias] = norm_backward(dy, x, at::Tensor(), rstd, weight, normalized_shape,
                                            weight_grad, false, dh);
  return {dx, dweight};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, at::IntArrayRef normalized_shape, bool weight_grad,
    bool bias_grad, const std::optional<at::Tensor>& dh) {
  return norm_backward(dy, x, mean, rstd, weight, normalized_shape, weight_grad, bias_grad, dh);
}

at::Tensor act_backward(const at::Tensor& dy, const at::Tensor& x, int64_t act) {
  check_x(x);
  check_like(dy, x, "dy");
  check_activation(act);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor dx = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return dx;
  KA_DISPATCH(x, "ka_act_backward", [&] {
    ka::launch_act_backward(device_ptr<scalar_t>(x), device_ptr<scalar_t>(dy),
                            device_ptr<scalar_t>(dx), x.numel(),
                            static_cast<ka::Activation>(act), at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return dx;
}

at::Tensor swiglu(const at::Tensor& a, const at::Tensor& b) {
  check_x(a);
  check_like(b, a, "b");
  const c10::cuda::CUDAGuard guard(a.device());
  at::Tensor y = at::empty(a.sizes(), a.options());
  if (a.numel() == 0) return y;
  KA_DISPATCH(a, "ka_swiglu", [&] {
    ka::launch_swiglu(device_ptr<scalar_t>(a), device_ptr<scalar_t>(b), device_ptr<scalar_t>(y),
                      a.numel(), at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dy, const at::Tensor& a,
                                                   const at::Tensor& b) {
  check_x(a);
  check_like(b, a, "b");
  check_like(dy, a, "dy");
  const c10::cuda::CUDAGuard guard(a.device());
  at::Tensor da = at::empty(a.sizes(), a.options());
  at::Tensor db = at::empty(a.sizes(), a.options());
  if (a.numel() == 0) return {da, db};
  KA_DISPATCH(a, "ka_swiglu_backward", [&] {
    ka::launch_swiglu_backward(device_ptr<scalar_t>(a), device_ptr<scalar_t>(b),
                               device_ptr<scalar_t>(dy), device_ptr<scalar_t>(da),
                               device_ptr<scalar_t>(db), a.numel(),
                               at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {da, db};
}

}  // namespace ka_torch
