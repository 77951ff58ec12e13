// The CUDA reference kernels as torch.library operators (namespace advisor_cuda), so that:
//   - a forward + backward runs no Python: the autograd engine calls the backward kernels from
//     its own thread, as it does eager's (autograd.cpp holds the Autograd kernels and their
//     backward nodes);
//   - torch.compile traces a call as one operator (Meta kernels give the output shapes) and
//     AOTAutograd sees the backward as the operators below, with no graph break.
// Each operator has a CUDA kernel (ops.h) and a Meta kernel here. The pattern is torchvision's
// (roi_align and friends).
//
// Built without -DKA_NO_TORCH_LIBRARY only: benchmarks/tune_rowwise.py loads several variants
// of the extension into one process, and a namespace can be defined once per process.
#ifndef KA_NO_TORCH_LIBRARY

#include <tuple>
#include <vector>

#include <torch/library.h>

#include "ops.h"

namespace ka_torch {
namespace {

using Tensors2 = std::tuple<at::Tensor, at::Tensor>;
using Tensors3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Tensors4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;
using OptTensor = std::optional<at::Tensor>;

// ---- CUDA kernels with the operators' signatures (no `out`)

at::Tensor softmax_cuda(const at::Tensor& x, bool log) { return softmax(x, log, std::nullopt); }

Tensors2 rms_norm_cuda(const at::Tensor& x, at::IntArrayRef shape, const OptTensor& w, double eps) {
  return rms_norm(x, shape, w, eps, std::nullopt);
}

Tensors3 layer_norm_cuda(const at::Tensor& x, at::IntArrayRef shape, const OptTensor& w,
                         const OptTensor& b, double eps) {
  return layer_norm(x, shape, w, b, eps, std::nullopt);
}

at::Tensor act_cuda(const at::Tensor& x, int64_t act) {
  return bias_act(x, std::nullopt, act, std::nullopt);
}

at::Tensor bias_act_cuda(const at::Tensor& x, const at::Tensor& bias, int64_t act) {
  return bias_act(x, bias, act, std::nullopt);
}

// ---- Meta kernels: output shapes, dtypes and devices only

at::Tensor like(const at::Tensor& x) { return at::empty(x.sizes(), x.options()); }

at::Tensor stat_meta(const at::Tensor& x, size_t normalized_dims) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  for (size_t i = 0; i < normalized_dims; ++i) shape[shape.size() - 1 - i] = 1;
  return at::empty(shape, x.options().dtype(x.scalar_type() == at::kDouble ? at::kDouble
                                                                           : at::kFloat));
}

at::Tensor param_grad_meta(const at::Tensor& x, at::IntArrayRef shape, bool wanted) {
  return wanted ? at::empty(shape, x.options()) : at::empty({0}, x.options());
}

at::Tensor softmax_meta(const at::Tensor& x, bool) { return like(x); }
at::Tensor softmax_backward_meta(const at::Tensor& dy, const at::Tensor&, bool) { return like(dy); }

Tensors2 rms_norm_meta(const at::Tensor& x, at::IntArrayRef shape, const OptTensor&, double) {
  return {like(x), stat_meta(x, shape.size())};
}

Tensors2 rms_norm_backward_meta(const at::Tensor&, const at::Tensor& x, const at::Tensor&,
                                const OptTensor&, at::IntArrayRef shape, bool weight_grad,
                                const OptTensor&) {
  return {like(x), param_grad_meta(x, shape, weight_grad)};
}

Tensors3 layer_norm_meta(const at::Tensor& x, at::IntArrayRef shape, const OptTensor&,
                         const OptTensor&, double) {
  return {like(x), stat_meta(x, shape.size()), stat_meta(x, shape.size())};
}

Tensors3 layer_norm_backward_meta(const at::Tensor&, const at::Tensor& x, const at::Tensor&,
                                  const at::Tensor&, const OptTensor&, at::IntArrayRef shape,
                                  bool weight_grad, bool bias_grad, const OptTensor&) {
  return {like(x), param_grad_meta(x, shape, weight_grad), param_grad_meta(x, shape, bias_grad)};
}

Tensors3 add_rms_norm_meta(const at::Tensor& x, const at::Tensor&, at::IntArrayRef shape,
                           const OptTensor&, double) {
  return {like(x), like(x), stat_meta(x, shape.size())};
}

Tensors4 add_layer_norm_meta(const at::Tensor& x, const at::Tensor&, at::IntArrayRef shape,
                             const OptTensor&, const OptTensor&, double) {
  return {like(x), like(x), stat_meta(x, shape.size()), stat_meta(x, shape.size())};
}

at::Tensor act_meta(const at::Tensor& x, int64_t) { return like(x); }
at::Tensor act_backward_meta(const at::Tensor&, const at::Tensor& x, int64_t) { return like(x); }
at::Tensor bias_act_meta(const at::Tensor& x, const at::Tensor&, int64_t) { return like(x); }
at::Tensor swiglu_meta(const at::Tensor& a, const at::Tensor&) { return like(a); }
Tensors3 cross_entropy_meta(const at::Tensor& logits, const at::Tensor&, int64_t,
                            int64_t reduction) {
  const auto acc = logits.options().dtype(logits.scalar_type() == at::kDouble ? at::kDouble
                                                                              : at::kFloat);
  const int64_t rows = logits.size(0);
  const bool reduce = reduction != 0;
  return {reduce ? at::empty({}, logits.options()) : at::empty({rows}, logits.options()),
          at::empty({rows}, acc), at::empty({reduce ? 1 : 0}, acc)};
}

at::Tensor cross_entropy_backward_meta(const at::Tensor&, const at::Tensor& logits,
                                       const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                       int64_t, int64_t) {
  return like(logits);
}

Tensors2 swiglu_backward_meta(const at::Tensor&, const at::Tensor& a, const at::Tensor&) {
  return {like(a), like(a)};
}

}  // namespace
}  // namespace ka_torch

using namespace ka_torch;  // NOLINT: the registration blocks below name its kernels

TORCH_LIBRARY(advisor_cuda, m) {
  m.def("softmax(Tensor x, bool log) -> Tensor");
  m.def("softmax_backward(Tensor dy, Tensor y, bool log) -> Tensor");
  m.def("rms_norm(Tensor x, int[] normalized_shape, Tensor? weight, float eps) -> (Tensor, Tensor)");
  m.def("rms_norm_backward(Tensor dy, Tensor x, Tensor rstd, Tensor? weight, "
        "int[] normalized_shape, bool weight_grad, Tensor? dh) -> (Tensor, Tensor)");
  m.def("layer_norm(Tensor x, int[] normalized_shape, Tensor? weight, Tensor? bias, float eps) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("layer_norm_backward(Tensor dy, Tensor x, Tensor mean, Tensor rstd, Tensor? weight, "
        "int[] normalized_shape, bool weight_grad, bool bias_grad, Tensor? dh) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("add_rms_norm(Tensor x, Tensor residual, int[] normalized_shape, Tensor? weight, "
        "float eps) -> (Tensor, Tensor, Tensor)");
  m.def("add_layer_norm(Tensor x, Tensor residual, int[] normalized_shape, Tensor? weight, "
        "Tensor? bias, float eps) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("act(Tensor x, int act) -> Tensor");
  m.def("act_backward(Tensor dy, Tensor x, int act) -> Tensor");
  m.def("bias_act(Tensor x, Tensor bias, int act) -> Tensor");
  m.def("swiglu(Tensor a, Tensor b) -> Tensor");
  m.def("swiglu_backward(Tensor dy, Tensor a, Tensor b) -> (Tensor, Tensor)");
  m.def("cross_entropy(Tensor logits, Tensor target, int ignore_index, int reduction) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("cross_entropy_backward(Tensor dloss, Tensor logits, Tensor target, Tensor lse, "
        "Tensor count, int ignore_index, int reduction) -> Tensor");
}

TORCH_LIBRARY_IMPL(advisor_cuda, CUDA, m) {
  m.impl("softmax", &softmax_cuda);
  m.impl("softmax_backward", &softmax_backward);
  m.impl("rms_norm", &rms_norm_cuda);
  m.impl("rms_norm_backward", &rms_norm_backward);
  m.impl("layer_norm", &layer_norm_cuda);
  m.impl("layer_norm_backward", &layer_norm_backward);
  m.impl("add_rms_norm", &add_rms_norm);
  m.impl("add_layer_norm", &add_layer_norm);
  m.impl("act", &act_cuda);
  m.impl("act_backward", &act_backward);
  m.impl("bias_act", &bias_act_cuda);
  m.impl("swiglu", &swiglu);
  m.impl("swiglu_backward", &swiglu_backward);
  m.impl("cross_entropy", &cross_entropy);
  m.impl("cross_entropy_backward", &cross_entropy_backward);
}

TORCH_LIBRARY_IMPL(advisor_cuda, Meta, m) {
  m.impl("softmax", &softmax_meta);
  m.impl("softmax_backward", &softmax_backward_meta);
  m.impl("rms_norm", &rms_norm_meta);
  m.impl("rms_norm_backward", &rms_norm_backward_meta);
  m.impl("layer_norm", &layer_norm_meta);
  m.impl("layer_norm_backward", &layer_norm_backward_meta);
  m.impl("add_rms_norm", &add_rms_norm_meta);
  m.impl("add_layer_norm", &add_layer_norm_meta);
  m.impl("act", &act_meta);
  m.impl("act_backward", &act_backward_meta);
  m.impl("bias_act", &bias_act_meta);
  m.impl("swiglu", &swiglu_meta);
  m.impl("swiglu_backward", &swiglu_backward_meta);
  m.impl("cross_entropy", &cross_entropy_meta);
  m.impl("cross_entropy_backward", &cross_entropy_backward_meta);
}

#endif  // KA_NO_TORCH_LIBRARY
