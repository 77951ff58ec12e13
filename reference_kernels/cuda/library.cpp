// The CUDA reference kernels as torch.library operators (namespace advisor_cuda), with their
// gradients as C++ autograd Functions, so that:
//   - a forward + backward runs no Python: the autograd engine calls the backward kernels from
//     its own thread, as it does eager's (the host cost of a call is eager's, see
//     docs/benchmarks.md);
//   - torch.compile traces a call as one operator (Meta kernels give the output shapes) and
//     AOTAutograd sees the backward as the operators below, with no graph break.
// Each operator has a CUDA kernel (ops.h), a Meta kernel and, where it has a gradient, an
// Autograd kernel that records the Function only when grad mode is on and an input requires
// grad. The pattern is torchvision's (roi_align and friends).
//
// Built without -DKA_NO_TORCH_LIBRARY only: benchmarks/tune_rowwise.py loads several variants
// of the extension into one process, and a namespace can be defined once per process.
#ifndef KA_NO_TORCH_LIBRARY

#include <tuple>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "ops.h"

namespace ka_torch {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Tensors2 = std::tuple<at::Tensor, at::Tensor>;
using Tensors3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using OptTensor = std::optional<at::Tensor>;

template <typename Sig>
c10::TypedOperatorHandle<Sig> handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

// ---- dispatcher calls (autograd, then CUDA / Meta / fake tensors, whichever applies)

at::Tensor softmax_op(const at::Tensor& x, bool log) {
  static const auto op = handle<at::Tensor(const at::Tensor&, bool)>("advisor_cuda::softmax");
  return op.call(x, log);
}

at::Tensor softmax_backward_op(const at::Tensor& dy, const at::Tensor& y, bool log) {
  static const auto op = handle<at::Tensor(const at::Tensor&, const at::Tensor&, bool)>(
      "advisor_cuda::softmax_backward");
  return op.call(dy, y, log);
}

Tensors2 rms_norm_op(const at::Tensor& x, at::IntArrayRef shape, const OptTensor& w, double eps) {
  static const auto op = handle<Tensors2(const at::Tensor&, at::IntArrayRef, const OptTensor&,
                                         double)>("advisor_cuda::rms_norm");
  return op.call(x, shape, w, eps);
}

Tensors2 rms_norm_backward_op(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& rstd,
                              const OptTensor& w, at::IntArrayRef shape, bool weight_grad) {
  static const auto op =
      handle<Tensors2(const at::Tensor&, const at::Tensor&, const at::Tensor&, const OptTensor&,
                      at::IntArrayRef, bool)>("advisor_cuda::rms_norm_backward");
  return op.call(dy, x, rstd, w, shape, weight_grad);
}

Tensors3 layer_norm_op(const at::Tensor& x, at::IntArrayRef shape, const OptTensor& w,
                       const OptTensor& b, double eps) {
  static const auto op = handle<Tensors3(const at::Tensor&, at::IntArrayRef, const OptTensor&,
                                         const OptTensor&, double)>("advisor_cuda::layer_norm");
  return op.call(x, shape, w, b, eps);
}

Tensors3 layer_norm_backward_op(const at::Tensor& dy, const at::Tensor& x, const at::Tensor& mean,
                                const at::Tensor& rstd, const OptTensor& w, at::IntArrayRef shape,
                                bool weight_grad, bool bias_grad) {
  static const auto op =
      handle<Tensors3(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                      const OptTensor&, at::IntArrayRef, bool, bool)>(
          "advisor_cuda::layer_norm_backward");
  return op.call(dy, x, mean, rstd, w, shape, weight_grad, bias_grad);
}

at::Tensor act_op(const at::Tensor& x, int64_t act) {
  static const auto op = handle<at::Tensor(const at::Tensor&, int64_t)>("advisor_cuda::act");
  return op.call(x, act);
}

at::Tensor act_backward_op(const at::Tensor& dy, const at::Tensor& x, int64_t act) {
  static const auto op = handle<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t)>(
      "advisor_cuda::act_backward");
  return op.call(dy, x, act);
}

at::Tensor swiglu_op(const at::Tensor& a, const at::Tensor& b) {
  static const auto op =
      handle<at::Tensor(const at::Tensor&, const at::Tensor&)>("advisor_cuda::swiglu");
  return op.call(a, b);
}

Tensors2 swiglu_backward_op(const at::Tensor& dy, const at::Tensor& a, const at::Tensor& b) {
  static const auto op = handle<Tensors2(const at::Tensor&, const at::Tensor&, const at::Tensor&)>(
      "advisor_cuda::swiglu_backward");
  return op.call(dy, a, b);
}

// ---- autograd

bool requires_grad(const at::Tensor& t) { return t.defined() && t.requires_grad(); }
bool requires_grad(const OptTensor& t) { return t.has_value() && requires_grad(*t); }

template <typename... Ts>
bool records_grad(const Ts&... inputs) {
  return at::GradMode::is_enabled() && (requires_grad(inputs) || ...);
}

at::Tensor or_none(const OptTensor& t) { return t.has_value() ? *t : at::Tensor(); }

// The upstream gradient as the kernels take it (dense; autograd may hand over an expanded one).
at::Tensor dense(const at::Tensor& grad) { return grad.contiguous(); }

struct SoftmaxFunction : public torch::autograd::Function<SoftmaxFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, bool log) {
    at::AutoDispatchBelowADInplaceOrView below;
    at::Tensor y = softmax_op(x, log);
    ctx->saved_data["log"] = log;
    ctx->save_for_backward({y});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor y = ctx->get_saved_variables()[0];
    return {softmax_backward_op(dense(grads[0]), y, ctx->saved_data["log"].toBool()),
            at::Tensor()};
  }
};

// rms_norm and layer_norm: outputs (y, statistics...); only y is differentiable.
struct RmsNormFunction : public torch::autograd::Function<RmsNormFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, at::IntArrayRef shape,
                               const OptTensor& weight, double eps) {
    at::AutoDispatchBelowADInplaceOrView below;
    auto [y, rstd] = rms_norm_op(x, shape, weight, eps);
    ctx->saved_data["shape"] = shape;
    ctx->save_for_backward({x, or_none(weight), rstd});
    ctx->mark_non_differentiable({rstd});
    return {y, rstd};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& weight = saved[1];
    const bool weight_grad = weight.defined() && ctx->needs_input_grad(1);
    const std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector();
    auto [dx, dweight] = rms_norm_backward_op(
        dense(grads[0]), saved[0], saved[2],
        weight.defined() ? OptTensor(weight) : OptTensor(), shape, weight_grad);
    return {dx, at::Tensor(), weight_grad ? dweight : at::Tensor(), at::Tensor()};
  }
};

struct LayerNormFunction : public torch::autograd::Function<LayerNormFunction> {
  static variable_list forward(AutogradContext* ctx, const at::Tensor& x, at::IntArrayRef shape,
                               const OptTensor& weight, const OptTensor& bias, double eps) {
    at::AutoDispatchBelowADInplaceOrView below;
    auto [y, mean, rstd] = layer_norm_op(x, shape, weight, bias, eps);
    ctx->saved_data["shape"] = shape;
    ctx->saved_data["has_weight"] = weight.has_value();
    ctx->saved_data["has_bias"] = bias.has_value();
    ctx->save_for_backward({x, or_none(weight), mean, rstd});
    ctx->mark_non_differentiable({mean, rstd});
    return {y, mean, rstd};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor& weight = saved[1];
    const bool has_weight = ctx->saved_data["has_weight"].toBool();
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    // Edges follow the tensor inputs: x, then weight and bias where given.
    const bool weight_grad = has_weight && ctx->needs_input_grad(1);
    const bool bias_grad = has_bias && ctx->needs_input_grad(has_weight ? 2 : 1);
    const std::vector<int64_t> shape = ctx->saved_data["shape"].toIntVector();
    auto [dx, dweight, dbias] = layer_norm_backward_op(
        dense(grads[0]), saved[0], saved[2], saved[3],
        has_weight ? OptTensor(weight) : OptTensor(), shape, weight_grad, bias_grad);
    return {dx, at::Tensor(), weight_grad ? dweight : at::Tensor(),
            bias_grad ? dbias : at::Tensor(), at::Tensor()};
  }
};

struct ActFunction : public torch::autograd::Function<ActFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, int64_t act) {
    at::AutoDispatchBelowADInplaceOrView below;
    ctx->saved_data["act"] = act;
    ctx->save_for_backward({x});
    return act_op(x, act);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    return {act_backward_op(dense(grads[0]), x, ctx->saved_data["act"].toInt()), at::Tensor()};
  }
};

struct SwigluFunction : public torch::autograd::Function<SwigluFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& a, const at::Tensor& b) {
    at::AutoDispatchBelowADInplaceOrView below;
    ctx->save_for_backward({a, b});
    return swiglu_op(a, b);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    auto [da, db] = swiglu_backward_op(dense(grads[0]), saved[0], saved[1]);
    return {da, db};
  }
};

// ---- Autograd kernels: the Function when a gradient is recorded, else straight below autograd

at::Tensor softmax_autograd(const at::Tensor& x, bool log) {
  if (records_grad(x)) return SoftmaxFunction::apply(x, log);
  at::AutoDispatchBelowADInplaceOrView below;
  return softmax_op(x, log);
}

Tensors2 rms_norm_autograd(const at::Tensor& x, at::IntArrayRef shape, const OptTensor& weight,
                           double eps) {
  if (records_grad(x, weight)) {
    const variable_list out = RmsNormFunction::apply(x, shape, weight, eps);
    return {out[0], out[1]};
  }
  at::AutoDispatchBelowADInplaceOrView below;
  return rms_norm_op(x, shape, weight, eps);
}

Tensors3 layer_norm_autograd(const at::Tensor& x, at::IntArrayRef shape, const OptTensor& weight,
                             const OptTensor& bias, double eps) {
  if (records_grad(x, weight, bias)) {
    const variable_list out = LayerNormFunction::apply(x, shape, weight, bias, eps);
    return {out[0], out[1], out[2]};
  }
  at::AutoDispatchBelowADInplaceOrView below;
  return layer_norm_op(x, shape, weight, bias, eps);
}

at::Tensor act_autograd(const at::Tensor& x, int64_t act) {
  if (records_grad(x)) return ActFunction::apply(x, act);
  at::AutoDispatchBelowADInplaceOrView below;
  return act_op(x, act);
}

at::Tensor swiglu_autograd(const at::Tensor& a, const at::Tensor& b) {
  if (records_grad(a, b)) return SwigluFunction::apply(a, b);
  at::AutoDispatchBelowADInplaceOrView below;
  return swiglu_op(a, b);
}

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
                                const OptTensor&, at::IntArrayRef shape, bool weight_grad) {
  return {like(x), param_grad_meta(x, shape, weight_grad)};
}

Tensors3 layer_norm_meta(const at::Tensor& x, at::IntArrayRef shape, const OptTensor&,
                         const OptTensor&, double) {
  return {like(x), stat_meta(x, shape.size()), stat_meta(x, shape.size())};
}

Tensors3 layer_norm_backward_meta(const at::Tensor&, const at::Tensor& x, const at::Tensor&,
                                  const at::Tensor&, const OptTensor&, at::IntArrayRef shape,
                                  bool weight_grad, bool bias_grad) {
  return {like(x), param_grad_meta(x, shape, weight_grad), param_grad_meta(x, shape, bias_grad)};
}

at::Tensor act_meta(const at::Tensor& x, int64_t) { return like(x); }
at::Tensor act_backward_meta(const at::Tensor&, const at::Tensor& x, int64_t) { return like(x); }
at::Tensor bias_act_meta(const at::Tensor& x, const at::Tensor&, int64_t) { return like(x); }
at::Tensor swiglu_meta(const at::Tensor& a, const at::Tensor&) { return like(a); }
Tensors2 swiglu_backward_meta(const at::Tensor&, const at::Tensor& a, const at::Tensor&) {
  return {like(a), like(a)};
}

}  // namespace

// ---- what Python's fast path calls (ops.h)

at::Tensor call_softmax(const at::Tensor& x, bool log) { return softmax_op(x, log); }

Tensors2 call_rms_norm(const at::Tensor& x, at::IntArrayRef shape, const OptTensor& weight,
                       double eps) {
  return rms_norm_op(x, shape, weight, eps);
}

Tensors3 call_layer_norm(const at::Tensor& x, at::IntArrayRef shape, const OptTensor& weight,
                         const OptTensor& bias, double eps) {
  return layer_norm_op(x, shape, weight, bias, eps);
}

at::Tensor call_act(const at::Tensor& x, int64_t act) { return act_op(x, act); }

at::Tensor call_bias_act(const at::Tensor& x, const at::Tensor& bias, int64_t act) {
  static const auto op = handle<at::Tensor(const at::Tensor&, const at::Tensor&, int64_t)>(
      "advisor_cuda::bias_act");
  return op.call(x, bias, act);
}

at::Tensor call_swiglu(const at::Tensor& a, const at::Tensor& b) { return swiglu_op(a, b); }

}  // namespace ka_torch

using namespace ka_torch;  // NOLINT: the registration blocks below name its kernels

TORCH_LIBRARY(advisor_cuda, m) {
  m.def("softmax(Tensor x, bool log) -> Tensor");
  m.def("softmax_backward(Tensor dy, Tensor y, bool log) -> Tensor");
  m.def("rms_norm(Tensor x, int[] normalized_shape, Tensor? weight, float eps) -> (Tensor, Tensor)");
  m.def("rms_norm_backward(Tensor dy, Tensor x, Tensor rstd, Tensor? weight, "
        "int[] normalized_shape, bool weight_grad) -> (Tensor, Tensor)");
  m.def("layer_norm(Tensor x, int[] normalized_shape, Tensor? weight, Tensor? bias, float eps) "
        "-> (Tensor, Tensor, Tensor)");
  m.def("layer_norm_backward(Tensor dy, Tensor x, Tensor mean, Tensor rstd, Tensor? weight, "
        "int[] normalized_shape, bool weight_grad, bool bias_grad) -> (Tensor, Tensor, Tensor)");
  m.def("act(Tensor x, int act) -> Tensor");
  m.def("act_backward(Tensor dy, Tensor x, int act) -> Tensor");
  m.def("bias_act(Tensor x, Tensor bias, int act) -> Tensor");
  m.def("swiglu(Tensor a, Tensor b) -> Tensor");
  m.def("swiglu_backward(Tensor dy, Tensor a, Tensor b) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(advisor_cuda, CUDA, m) {
  m.impl("softmax", &softmax_cuda);
  m.impl("softmax_backward", &softmax_backward);
  m.impl("rms_norm", &rms_norm_cuda);
  m.impl("rms_norm_backward", &rms_norm_backward);
  m.impl("layer_norm", &layer_norm_cuda);
  m.impl("layer_norm_backward", &layer_norm_backward);
  m.impl("act", &act_cuda);
  m.impl("act_backward", &act_backward);
  m.impl("bias_act", &bias_act_cuda);
  m.impl("swiglu", &swiglu);
  m.impl("swiglu_backward", &swiglu_backward);
}

TORCH_LIBRARY_IMPL(advisor_cuda, Meta, m) {
  m.impl("softmax", &softmax_meta);
  m.impl("softmax_backward", &softmax_backward_meta);
  m.impl("rms_norm", &rms_norm_meta);
  m.impl("rms_norm_backward", &rms_norm_backward_meta);
  m.impl("layer_norm", &layer_norm_meta);
  m.impl("layer_norm_backward", &layer_norm_backward_meta);
  m.impl("act", &act_meta);
  m.impl("act_backward", &act_backward_meta);
  m.impl("bias_act", &bias_act_meta);
  m.impl("swiglu", &swiglu_meta);
  m.impl("swiglu_backward", &swiglu_backward_meta);
}

TORCH_LIBRARY_IMPL(advisor_cuda, Autograd, m) {
  m.impl("softmax", &softmax_autograd);
  m.impl("rms_norm", &rms_norm_autograd);
  m.impl("layer_norm", &layer_norm_autograd);
  m.impl("act", &act_autograd);
  m.impl("swiglu", &swiglu_autograd);
  // The backward operators run inside a backward pass (no second derivative): their results
  // carry no autograd history, as with grad mode off.
  for (const char* name : {"softmax_backward", "rms_norm_backward", "layer_norm_backward",
                           "act_backward", "swiglu_backward"}) {
    m.impl(name, torch::CppFunction::makeFallthrough());
  }
}

#endif  // KA_NO_TORCH_LIBRARY
