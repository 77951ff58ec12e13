// The tensor-level entry points of the CUDA reference kernels (at:: tensors in, at:: tensors
// out), shared by the pybind module (binding.cpp) and the torch.library operators
// (library.cpp). forward.cpp and backward.cpp define them; each checks its arguments with
// TORCH_CHECK, allocates its outputs on x's device and launches on the current stream.
#pragma once

#include <optional>
#include <tuple>

#include <ATen/ATen.h>

namespace ka_torch {

// ---- forward.cpp; `out`, when given, receives y (tests poison it).
at::Tensor softmax(const at::Tensor& x, bool log, const std::optional<at::Tensor>& out);
std::tuple<at::Tensor, at::Tensor> rms_norm(const at::Tensor& x, at::IntArrayRef normalized_shape,
                                            const std::optional<at::Tensor>& weight, double eps,
                                            const std::optional<at::Tensor>& out);
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm(
    const at::Tensor& x, at::IntArrayRef normalized_shape, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double eps, const std::optional<at::Tensor>& out);
// act(x + bias[col]); no bias: act(x).
at::Tensor bias_act(const at::Tensor& x, const std::optional<at::Tensor>& bias, int64_t act,
                    const std::optional<at::Tensor>& out);

// ---- backward.cpp (and SwiGLU's forward). A parameter gradient not asked for is an empty
// tensor of shape [0].
at::Tensor softmax_backward(const at::Tensor& dy, const at::Tensor& y, bool log);
std::tuple<at::Tensor, at::Tensor> rms_norm_backward(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, at::IntArrayRef normalized_shape, bool weight_grad);
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, at::IntArrayRef normalized_shape, bool weight_grad,
    bool bias_grad);
at::Tensor act_backward(const at::Tensor& dy, const at::Tensor& x, int64_t act);
at::Tensor swiglu(const at::Tensor& a, const at::Tensor& b);
std::tuple<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dy, const at::Tensor& a,
                                                   const at::Tensor& b);

// ---- library.cpp: the advisor_cuda operators called through the dispatcher, so that autograd
// records them when an input requires grad (Python's fast path calls these).
at::Tensor call_softmax(const at::Tensor& x, bool log);
std::tuple<at::Tensor, at::Tensor> call_rms_norm(const at::Tensor& x,
                                                 at::IntArrayRef normalized_shape,
                                                 const std::optional<at::Tensor>& weight,
                                                 double eps);
std::tuple<at::Tensor, at::Tensor, at::Tensor> call_layer_norm(
    const at::Tensor& x, at::IntArrayRef normalized_shape, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, double eps);
at::Tensor call_act(const at::Tensor& x, int64_t act);
at::Tensor call_bias_act(const at::Tensor& x, const at::Tensor& bias, int64_t act);
at::Tensor call_swiglu(const at::Tensor& a, const at::Tensor& b);

}  // namespace ka_torch
