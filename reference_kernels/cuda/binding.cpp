// Torch binding of the CUDA reference kernels: input checks, output allocation, dtype
// dispatch, the current stream and a launch check after every launch. The kernels and their
// launchers live in the .cu files (launchers.h), which need no torch headers.
//
// Every op takes an optional preallocated `out` so that tests can poison it; out must have x's
// shape, dtype and device, be contiguous and not be x.
#include <limits>
#include <optional>
#include <tuple>
#include <vector>

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/extension.h>

#include "launchers.h"

namespace {

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

void check_x(const at::Tensor& x) {
  TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor, got one on ", x.device());
  TORCH_CHECK(x.dim() >= 1, "x must have at least one dimension");
  TORCH_CHECK(x.is_contiguous(), "x must be contiguous (dense last dim, packed rows), got strides ",
              x.strides());
  TORCH_CHECK(x.size(-1) <= std::numeric_limits<int32_t>::max(), "the last dim of x (",
              x.size(-1), ") must fit in int32");
}

// weight / bias: same device and dtype as x, contiguous, `shape` exactly.
void check_param(const std::optional<at::Tensor>& p, const at::Tensor& x, at::IntArrayRef shape,
                 const char* name) {
  if (!p.has_value() || !p->defined()) return;
  TORCH_CHECK(p->device() == x.device(), name, " must be on ", x.device(), ", got ", p->device());
  TORCH_CHECK(p->scalar_type() == x.scalar_type(), name, " dtype ", p->scalar_type(),
              " must match x dtype ", x.scalar_type());
  TORCH_CHECK(p->sizes() == shape, name, " must have shape ", shape, ", got ", p->sizes());
  TORCH_CHECK(p->is_contiguous(), name, " must be contiguous");
}

at::Tensor output_like(const at::Tensor& x, const std::optional<at::Tensor>& out) {
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
int64_t normalized_cols(const at::Tensor& x, at::IntArrayRef normalized_shape) {
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
int64_t row_count(const at::Tensor& x, int64_t cols) {
  const int64_t rows = x.numel() / cols;
  TORCH_CHECK(rows <= std::numeric_limits<int32_t>::max(), "x has ", rows,
              " rows; at most 2^31 - 1 are supported");
  return rows;
}

// Per-row statistics as native_layer_norm returns them: x's leading dims, then 1 per
// normalized dim, in float (double for fp64 inputs).
at::Tensor stat_tensor(const at::Tensor& x, int64_t normalized_dims) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  for (int64_t i = 0; i < normalized_dims; ++i) shape[shape.size() - 1 - i] = 1;
  const auto acc = x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  return at::empty(shape, x.options().dtype(acc));
}

at::Tensor softmax(const at::Tensor& x, const std::optional<at::Tensor>& out) {
  check_x(x);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = output_like(x, out);
  if (x.numel() == 0) return y;
  const int64_t cols = x.size(-1);
  const int64_t rows = row_count(x, cols);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "ka_softmax", [&] {
    ka::launch_softmax(device_ptr<scalar_t>(x), device_ptr<scalar_t>(y), rows, cols,
                       at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return y;
}

std::tuple<at::Tensor, at::Tensor> rms_norm(const at::Tensor& x,
                                            const std::vector<int64_t>& normalized_shape,
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
    const at::Tensor& x, const std::vector<int64_t>& normalized_shape,
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

at::Tensor bias_act(const at::Tensor& x, const at::Tensor& bias, int64_t act,
                    const std::optional<at::Tensor>& out) {
  check_x(x);
  check_param(bias, x, {x.size(-1)}, "bias");
  TORCH_CHECK(act >= static_cast<int>(ka::Activation::kRelu) &&
                  act <= static_cast<int>(ka::Activation::kSilu),
              "act must be 0 (relu), 1 (gelu erf), 2 (gelu tanh) or 3 (silu), got ", act);
  const c10::cuda::CUDAGuard guard(x.device());
  at::Tensor y = output_like(x, out);
  if (x.numel() == 0) return y;
  const int64_t cols = x.size(-1);
  const int64_t rows = x.numel() / cols;  // bias_act's grid loops over rows: no row limit
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "ka_bias_act", [&] {
    ka::launch_bias_act(device_ptr<scalar_t>(x), device_ptr<scalar_t>(bias),
                        device_ptr<scalar_t>(y), rows, cols, static_cast<ka::Activation>(act),
                        at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return y;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  // A failed TORCH_CHECK becomes a RuntimeError right here, independent of the translators
  // other modules register process-wide. (An earlier build that included narrower torch
  // headers crashed the interpreter on its first failed check under torch 2.11; cause not
  // established, the extension now follows the standard <torch/extension.h> path as well.)
  py::register_local_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const c10::Error& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
    }
  });
  m.def("softmax", &softmax, "softmax over the last dim", py::arg("x"),
        py::arg("out") = py::none());
  m.def("rms_norm", &rms_norm, "rms_norm forward; returns (y, rstd)", py::arg("x"),
        py::arg("normalized_shape"), py::arg("weight"), py::arg("eps"),
        py::arg("out") = py::none());
  m.def("layer_norm", &layer_norm, "layer_norm forward; returns (y, mean, rstd)", py::arg("x"),
        py::arg("normalized_shape"), py::arg("weight"), py::arg("bias"), py::arg("eps"),
        py::arg("out") = py::none());
  m.def("bias_act", &bias_act, "act(x + bias[col]) with act 0 relu, 1 gelu, 2 gelu tanh, 3 silu",
        py::arg("x"), py::arg("bias"), py::arg("act"), py::arg("out") = py::none());
}
