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
// h = x + residual, then its norm: (y, h, rstd) and (y, h, mean, rstd).
at::Tensor residual_sum(const at::Tensor& x, const at::Tensor& residual);
std::tuple<at::Tensor, at::Tensor, at::Tensor> add_rms_norm(
    const at::Tensor& x, const at::Tensor& residual, at::IntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight, double eps);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> add_layer_norm(
    const at::Tensor& x, const at::Tensor& residual, at::IntArrayRef normalized_shape,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps);
// act(x + bias[col]); no bias: act(x).
at::Tensor bias_act(const at::Tensor& x, const std::optional<at::Tensor>& bias, int64_t act,
                    const std::optional<at::Tensor>& out);

// ---- cross_entropy.cpp: reduction 0 none, 1 mean, 2 sum (ka::Reduction). The forward
// returns (loss, lse, count): loss in the logits' dtype ([rows] for none, else a scalar), lse
// per row and count (the targets not ignored, mean/sum; shape [0] for none) in float (double
// for fp64); the backward takes lse and count back.
std::tuple<at::Tensor, at::Tensor, at::Tensor> cross_entropy(const at::Tensor& logits,
                                                             const at::Tensor& target,
                                                             int64_t ignore_index,
                                                             int64_t reduction);
at::Tensor cross_entropy_backward(const at::Tensor& dloss, const at::Tensor& logits,
                                  const at::Tensor& target, const at::Tensor& lse,
                                  const at::Tensor& count, int64_t ignore_index,
                                  int64_t reduction);

// ---- backward.cpp (and SwiGLU's forward). A parameter gradient not asked for is an empty
// tensor of shape [0]. The norms' `dh`, when given, is added to dx (add_*_norm: the gradient of
// the new residual h, which is also the normalized input).
at::Tensor softmax_backward(const at::Tensor& dy, const at::Tensor& y, bool log);
std::tuple<at::Tensor, at::Tensor> rms_norm_backward(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, at::IntArrayRef normalized_shape, bool weight_grad,
    const std::optional<at::Tensor>& dh);
std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(
    const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& weight, at::IntArrayRef normalized_shape, bool weight_grad,
    bool bias_grad, const std::optional<at::Tensor>& dh);
at::Tensor act_backward(const at::Tensor& dy, const at::Tensor& x, int64_t act);
at::Tensor swiglu(const at::Tensor& a, const at::Tensor& b);
std::tuple<at::Tensor, at::Tensor> swiglu_backward(const at::Tensor& dy, const at::Tensor& a,
                                                   const at::Tensor& b);

}  // namespace ka_torch
