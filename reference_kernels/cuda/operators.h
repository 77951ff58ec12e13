// The advisor_cuda operators (library.cpp) called through the dispatcher: from an Autograd
// kernel below autograd (CUDA, Meta or fake tensors, whichever applies), from a backward node,
// and from Python's fast path (binding.cpp), where autograd records them.
#pragma once

#include <optional>
#include <tuple>

#include <ATen/core/dispatch/Dispatcher.h>

namespace ka_torch::op {

using OptTensor = std::optional<at::Tensor>;
using Tensors2 = std::tuple<at::Tensor, at::Tensor>;
using Tensors3 = std::tuple<at::Tensor, at::Tensor, at::Tensor>;
using Tensors4 = std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>;

template <typename Sig>
c10::TypedOperatorHandle<Sig> handle(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Sig>();
}

// One static handle per operator: the schema lookup happens on the first call only.
#define KA_OPERATOR(fn, name, Ret, ...)                                          \
  template <typename... Args>                                                    \
  Ret fn(Args&&... args) {                                                       \
    static const auto h = handle<Ret(__VA_ARGS__)>("advisor_cuda::" name);       \
    return h.call(std::forward<Args>(args)...);                                  \
  }

using T = const at::Tensor&;
using Opt = const OptTensor&;
using Shape = at::IntArrayRef;

KA_OPERATOR(softmax, "softmax", at::Tensor, T, bool)
KA_OPERATOR(softmax_backward, "softmax_backward", at::Tensor, T, T, bool)
KA_OPERATOR(rms_norm, "rms_norm", Tensors2, T, Shape, Opt, double)
KA_OPERATOR(rms_norm_backward, "rms_norm_backward", Tensors2, T, T, T, Opt, Shape, bool, Opt)
KA_OPERATOR(layer_norm, "layer_norm", Tensors3, T, Shape, Opt, Opt, double)
KA_OPERATOR(layer_norm_backward, "layer_norm_backward", Tensors3, T, T, T, T, Opt, Shape, bool,
            bool, Opt)
KA_OPERATOR(add_rms_norm, "add_rms_norm", Tensors3, T, T, Shape, Opt, double)
KA_OPERATOR(add_layer_norm, "add_layer_norm", Tensors4, T, T, Shape, Opt, Opt, double)
KA_OPERATOR(act, "act", at::Tensor, T, int64_t)
KA_OPERATOR(act_backward, "act_backward", at::Tensor, T, T, int64_t)
KA_OPERATOR(bias_act, "bias_act", at::Tensor, T, T, int64_t)
KA_OPERATOR(swiglu, "swiglu", at::Tensor, T, T)
KA_OPERATOR(swiglu_backward, "swiglu_backward", Tensors2, T, T, T)
KA_OPERATOR(cross_entropy, "cross_entropy", Tensors3, T, T, int64_t, int64_t)
KA_OPERATOR(cross_entropy_backward, "cross_entropy_backward", at::Tensor, T, T, T, T, T, int64_t,
            int64_t)

#undef KA_OPERATOR

}  // namespace ka_torch::op
