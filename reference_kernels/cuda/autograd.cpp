// The Autograd kernels of the advisor_cuda operators, with hand-written backward nodes as
// PyTorch's generated code has them (torch/csrc/autograd/generated/VariableType*.cpp): when
// grad mode is on and an input requires grad, the kernel creates the node, points it at the
// inputs' gradient edges, runs the operator below autograd, attaches the node to the
// differentiable outputs and saves what the backward needs. The node's apply() calls the
// backward operators. A torch::autograd::Function costs more host time per call (a context
// object, string-keyed saved data, output wrapping), which at small shapes is the whole
// difference from eager.
//
// Built without -DKA_NO_TORCH_LIBRARY only (see library.cpp).
#ifndef KA_NO_TORCH_LIBRARY

#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include <ATen/core/grad_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/csrc/autograd/saved_variable.h>
#include <torch/library.h>

#include "operators.h"

namespace ka_torch {
namespace {

namespace ag = torch::autograd;
using op::OptTensor;
using op::Tensors2;
using op::Tensors3;
using op::Tensors4;

// Nodes are held by std::shared_ptr (torch < 2.13) or c10::intrusive_ptr (2.13 on).
using NodePtr = decltype(ag::Edge::function);

template <typename N, typename Ptr = NodePtr>
auto make_node() {
  if constexpr (std::is_same_v<Ptr, std::shared_ptr<ag::Node>>) {
    return std::make_shared<N>();
  } else {
    return c10::make_intrusive<N>();
  }
}

// The node itself as its holder type: what SavedVariable::unpack needs for a saved output.
template <typename N>
NodePtr self_ptr(N* node) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<ag::Node>>) {
    return node->shared_from_this();
  } else {
    return node->getptr();
  }
}

bool requires_grad(const at::Tensor& t) { return t.defined() && t.requires_grad(); }
bool requires_grad(const OptTensor& t) { return t.has_value() && requires_grad(*t); }

template <typename... Ts>
bool records_grad(const Ts&... inputs) {
  return at::GradMode::is_enabled() && (requires_grad(inputs) || ...);
}

at::Tensor or_undefined(const OptTensor& t) { return t.has_value() ? *t : at::Tensor(); }
OptTensor or_none(const at::Tensor& t) { return t.defined() ? OptTensor(t) : std::nullopt; }

// The upstream gradient as the kernels take it (dense; autograd may hand over an expanded one).
at::Tensor dense(const at::Tensor& grad) { return grad.defined() ? grad.contiguous() : grad; }

template <typename F>
auto below_autograd(F&& f) {
  at::AutoDispatchBelowADInplaceOrView guard;
  return f();
}

// ---- backward nodes

struct SoftmaxBackward : ag::Node {
  ag::SavedVariable y_;
  bool log_ = false;

  std::string name() const override {
    return log_ ? "AdvisorLogSoftmaxBackward" : "AdvisorSoftmaxBackward";
  }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    y_.reset_data();
  }
  ag::variable_list apply(ag::variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!grads[0].defined()) return {at::Tensor()};
    return {op::softmax_backward(dense(grads[0]), y_.unpack(self_ptr(this)), log_)};
  }
};

// rms_norm / layer_norm, and their add_ forms. Edges: x, residual (add_ forms), weight, bias
// (layer_norm); outputs y, then h (add_ forms), whose gradient joins dx.
struct NormBackward : ag::Node {
  ag::SavedVariable x_;  // the normalized input: x, or h = x + residual
  ag::SavedVariable weight_;
  ag::SavedVariable mean_;  // layer_norm only
  ag::SavedVariable rstd_;
  std::vector<int64_t> shape_;
  bool layer_ = false;
  bool residual_ = false;

  std::string name() const override {
    return std::string(residual_ ? "AdvisorAdd" : "Advisor") +
           (layer_ ? "LayerNormBackward" : "RmsNormBackward");
  }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    x_.reset_data();
    weight_.reset_data();
    mean_.reset_data();
    rstd_.reset_data();
  }
  ag::variable_list apply(ag::variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const at::Tensor dy = dense(grads[0]);
    const at::Tensor dh = residual_ ? dense(grads[1]) : at::Tensor();
    const size_t w = residual_ ? 2 : 1;  // the weight's edge
    const bool weight_grad = dy.defined() && task_should_compute_output(w);
    const bool bias_grad = layer_ && dy.defined() && task_should_compute_output(w + 1);
    at::Tensor dx = dh;
    at::Tensor dweight;
    at::Tensor dbias;
    if (dy.defined()) {
      const OptTensor weight = or_none(weight_.unpack());
      if (layer_) {
        std::tie(dx, dweight, dbias) = op::layer_norm_backward(
            dy, x_.unpack(self_ptr(this)), mean_.unpack(), rstd_.unpack(), weight, shape_,
            weight_grad, bias_grad, or_none(dh));
      } else {
        std::tie(dx, dweight) = op::rms_norm_backward(dy, x_.unpack(self_ptr(this)),
                                                      rstd_.unpack(), weight, shape_,
                                                      weight_grad, or_none(dh));
      }
    }
    ag::variable_list out(num_outputs());
    out[0] = dx;
    if (residual_) out[1] = dx;  // d(x + residual) reaches both alike
    if (weight_grad) out[w] = dweight;
    if (bias_grad) out[w + 1] = dbias;
    return out;
  }
};

struct ActBackward : ag::Node {
  ag::SavedVariable x_;
  int64_t act_ = 0;

  std::string name() const override { return "AdvisorActBackward"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    x_.reset_data();
  }
  ag::variable_list apply(ag::variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!grads[0].defined()) return {at::Tensor()};
    return {op::act_backward(dense(grads[0]), x_.unpack(), act_)};
  }
};

struct SwigluBackward : ag::Node {
  ag::SavedVariable a_;
  ag::SavedVariable b_;

  std::string name() const override { return "AdvisorSwigluBackward"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    a_.reset_data();
    b_.reset_data();
  }
  ag::variable_list apply(ag::variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!grads[0].defined()) return {at::Tensor(), at::Tensor()};
    auto [da, db] = op::swiglu_backward(dense(grads[0]), a_.unpack(), b_.unpack());
    return {da, db};
  }
};

struct CrossEntropyBackward : ag::Node {
  ag::SavedVariable logits_;
  ag::SavedVariable target_;
  ag::SavedVariable lse_;
  ag::SavedVariable count_;
  int64_t ignore_index_ = 0;
  int64_t reduction_ = 0;

  std::string name() const override { return "AdvisorCrossEntropyBackward"; }
  void release_variables() override {
    std::lock_guard<std::mutex> lock(mutex_);
    logits_.reset_data();
    target_.reset_data();
    lse_.reset_data();
    count_.reset_data();
  }
  ag::variable_list apply(ag::variable_list&& grads) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!grads[0].defined()) return {at::Tensor()};
    return {op::cross_entropy_backward(dense(grads[0]), logits_.unpack(), target_.unpack(),
                                       lse_.unpack(), count_.unpack(), ignore_index_,
                                       reduction_)};
  }
};

// ---- Autograd kernels

at::Tensor softmax_autograd(const at::Tensor& x, bool log) {
  if (!records_grad(x)) return below_autograd([&] { return op::softmax(x, log); });
  auto node = make_node<SoftmaxBackward>();
  node->set_next_edges(ag::collect_next_edges(x));
  at::Tensor y = below_autograd([&] { return op::softmax(x, log); });
  ag::set_history(y, node);
  node->log_ = log;
  node->y_ = ag::SavedVariable(y, /*is_output=*/true);
  return y;
}

// The node of a norm; `h` is the normalized input (x, or the add_ forms' output h).
template <typename Ptr>
void save_norm(Ptr& node, const at::Tensor& h, bool is_output, const OptTensor& weight,
               const at::Tensor& mean, const at::Tensor& rstd, at::IntArrayRef shape) {
  node->x_ = ag::SavedVariable(h, is_output);
  node->weight_ = ag::SavedVariable(or_undefined(weight), false);
  node->mean_ = ag::SavedVariable(mean, false);
  node->rstd_ = ag::SavedVariable(rstd, false);
  node->shape_ = shape.vec();
}

Tensors2 rms_norm_autograd(const at::Tensor& x, at::IntArrayRef shape, const OptTensor& weight,
                           double eps) {
  if (!records_grad(x, weight)) {
    return below_autograd([&] { return op::rms_norm(x, shape, weight, eps); });
  }
  auto node = make_node<NormBackward>();
  node->set_next_edges(ag::collect_next_edges(x, or_undefined(weight)));
  auto [y, rstd] = below_autograd([&] { return op::rms_norm(x, shape, weight, eps); });
  ag::set_history(y, node);
  save_norm(node, x, false, weight, at::Tensor(), rstd, shape);
  return {y, rstd};
}

Tensors3 layer_norm_autograd(const at::Tensor& x, at::IntArrayRef shape, const OptTensor& weight,
                             const OptTensor& bias, double eps) {
  if (!records_grad(x, weight, bias)) {
    return below_autograd([&] { return op::layer_norm(x, shape, weight, bias, eps); });
  }
  auto node = make_node<NormBackward>();
  node->layer_ = true;
  node->set_next_edges(ag::collect_next_edges(x, or_undefined(weight), or_undefined(bias)));
  auto [y, mean, rstd] = below_autograd([&] { return op::layer_norm(x, shape, weight, bias, eps); });
  ag::set_history(y, node);
  save_norm(node, x, false, weight, mean, rstd, shape);
  return {y, mean, rstd};
}

Tensors3 add_rms_norm_autograd(const at::Tensor& x, const at::Tensor& residual,
                               at::IntArrayRef shape, const OptTensor& weight, double eps) {
  if (!records_grad(x, residual, weight)) {
    return below_autograd([&] { return op::add_rms_norm(x, residual, shape, weight, eps); });
  }
  auto node = make_node<NormBackward>();
  node->residual_ = true;
  node->set_next_edges(ag::collect_next_edges(x, residual, or_undefined(weight)));
  auto [y, h, rstd] =
      below_autograd([&] { return op::add_rms_norm(x, residual, shape, weight, eps); });
  ag::set_history(y, node);
  ag::set_history(h, node);
  save_norm(node, h, true, weight, at::Tensor(), rstd, shape);
  return {y, h, rstd};
}

Tensors4 add_layer_norm_autograd(const at::Tensor& x, const at::Tensor& residual,
                                 at::IntArrayRef shape, const OptTensor& weight,
                                 const OptTensor& bias, double eps) {
  if (!records_grad(x, residual, weight, bias)) {
    return below_autograd(
        [&] { return op::add_layer_norm(x, residual, shape, weight, bias, eps); });
  }
  auto node = make_node<NormBackward>();
  node->layer_ = true;
  node->residual_ = true;
  node->set_next_edges(
      ag::collect_next_edges(x, residual, or_undefined(weight), or_undefined(bias)));
  auto [y, h, mean, rstd] =
      below_autograd([&] { return op::add_layer_norm(x, residual, shape, weight, bias, eps); });
  ag::set_history(y, node);
  ag::set_history(h, node);
  save_norm(node, h, true, weight, mean, rstd, shape);
  return {y, h, mean, rstd};
}

at::Tensor act_autograd(const at::Tensor& x, int64_t act) {
  if (!records_grad(x)) return below_autograd([&] { return op::act(x, act); });
  auto node = make_node<ActBackward>();
  node->set_next_edges(ag::collect_next_edges(x));
  at::Tensor y = below_autograd([&] { return op::act(x, act); });
  ag::set_history(y, node);
  node->x_ = ag::SavedVariable(x, false);
  node->act_ = act;
  return y;
}

at::Tensor swiglu_autograd(const at::Tensor& a, const at::Tensor& b) {
  if (!records_grad(a, b)) return below_autograd([&] { return op::swiglu(a, b); });
  auto node = make_node<SwigluBackward>();
  node->set_next_edges(ag::collect_next_edges(a, b));
  at::Tensor y = below_autograd([&] { return op::swiglu(a, b); });
  ag::set_history(y, node);
  node->a_ = ag::SavedVariable(a, false);
  node->b_ = ag::SavedVariable(b, false);
  return y;
}

Tensors3 cross_entropy_autograd(const at::Tensor& logits, const at::Tensor& target,
                                int64_t ignore_index, int64_t reduction) {
  if (!records_grad(logits)) {
    return below_autograd(
        [&] { return op::cross_entropy(logits, target, ignore_index, reduction); });
  }
  auto node = make_node<CrossEntropyBackward>();
  node->set_next_edges(ag::collect_next_edges(logits));
  auto [loss, lse, count] = below_autograd(
      [&] { return op::cross_entropy(logits, target, ignore_index, reduction); });
  ag::set_history(loss, node);
  node->logits_ = ag::SavedVariable(logits, false);
  node->target_ = ag::SavedVariable(target, false);
  node->lse_ = ag::SavedVariable(lse, false);
  node->count_ = ag::SavedVariable(count, false);
  node->ignore_index_ = ignore_index;
  node->reduction_ = reduction;
  return {loss, lse, count};
}

}  // namespace
}  // namespace ka_torch

TORCH_LIBRARY_IMPL(advisor_cuda, Autograd, m) {
  using namespace ka_torch;  // NOLINT: the kernels above
  m.impl("softmax", &softmax_autograd);
  m.impl("rms_norm", &rms_norm_autograd);
  m.impl("layer_norm", &layer_norm_autograd);
  m.impl("add_rms_norm", &add_rms_norm_autograd);
  m.impl("add_layer_norm", &add_layer_norm_autograd);
  m.impl("act", &act_autograd);
  m.impl("swiglu", &swiglu_autograd);
  m.impl("cross_entropy", &cross_entropy_autograd);
  // The backward operators run inside a backward pass (no second derivative): their results
  // carry no autograd history, as with grad mode off.
  for (const char* name : {"softmax_backward", "rms_norm_backward", "layer_norm_backward",
                           "act_backward", "swiglu_backward", "cross_entropy_backward"}) {
    m.impl(name, torch::CppFunction::makeFallthrough());
  }
}

#endif  // KA_NO_TORCH_LIBRARY
