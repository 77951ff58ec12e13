// The pybind module of the CUDA reference kernels.
//
// Two kinds of entry point:
//   - the kernels themselves (softmax, rms_norm, ..., *_backward): forward-only calls that take
//     an optional preallocated `out` (tests poison it; out must have x's shape, dtype and
//     device, be contiguous and not be x);
//   - op_*: the advisor_cuda operators through the dispatcher (library.cpp), whose Autograd
//     kernels (autograd.cpp) record a backward node when an input requires grad. The Python
//     wrappers call these.
#include <optional>
#include <vector>

#include <torch/extension.h>

#include "ops.h"
#ifndef KA_NO_TORCH_LIBRARY
#include "operators.h"
#endif

namespace ka_torch {
#ifndef KA_NO_TORCH_LIBRARY
void register_fast_path(pybind11::module_& m);  // fast.cpp
#endif
}  // namespace ka_torch

namespace {

using OptTensor = std::optional<at::Tensor>;
using Shape = std::vector<int64_t>;

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  namespace py = pybind11;
  using namespace ka_torch;
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
  m.def("softmax", [](const at::Tensor& x, const OptTensor& out, bool log) {
          return softmax(x, log, out);
        }, "softmax (log_softmax if log) over the last dim", py::arg("x"),
        py::arg("out") = py::none(), py::arg("log") = false);
  m.def("rms_norm", [](const at::Tensor& x, const Shape& shape, const OptTensor& w, double eps,
                       const OptTensor& out) { return rms_norm(x, shape, w, eps, out); },
        "rms_norm forward; returns (y, rstd)", py::arg("x"), py::arg("normalized_shape"),
        py::arg("weight"), py::arg("eps"), py::arg("out") = py::none());
  m.def("layer_norm", [](const at::Tensor& x, const Shape& shape, const OptTensor& w,
                         const OptTensor& b, double eps, const OptTensor& out) {
          return layer_norm(x, shape, w, b, eps, out);
        }, "layer_norm forward; returns (y, mean, rstd)", py::arg("x"),
        py::arg("normalized_shape"), py::arg("weight"), py::arg("bias"), py::arg("eps"),
        py::arg("out") = py::none());
  m.def("bias_act", &bias_act, "act(x + bias[col]) with act 0 relu, 1 gelu, 2 gelu tanh, 3 silu;"
        " bias None: act(x)", py::arg("x"), py::arg("bias"), py::arg("act"),
        py::arg("out") = py::none());
  m.def("softmax_backward", &softmax_backward, "dx of softmax (log_softmax if log) from y",
        py::arg("dy"), py::arg("y"), py::arg("log"));
  m.def("rms_norm_backward", [](const at::Tensor& dy, const at::Tensor& x, const at::Tensor& rstd,
                                const OptTensor& w, const Shape& shape, bool weight_grad,
                                const OptTensor& dh) {
          return rms_norm_backward(dy, x, rstd, w, shape, weight_grad, dh);
        }, "(dx, dweight) of rms_norm; dh, when given, is added to dx", py::arg("dy"),
        py::arg("x"), py::arg("rstd"), py::arg("weight"), py::arg("normalized_shape"),
        py::arg("weight_grad"), py::arg("dh") = py::none());
  m.def("layer_norm_backward", [](const at::Tensor& dy, const at::Tensor& x,
                                  const at::Tensor& mean, const at::Tensor& rstd,
                                  const OptTensor& w, const Shape& shape, bool weight_grad,
                                  bool bias_grad, const OptTensor& dh) {
          return layer_norm_backward(dy, x, mean, rstd, w, shape, weight_grad, bias_grad, dh);
        }, "(dx, dweight, dbias) of layer_norm; dh, when given, is added to dx", py::arg("dy"),
        py::arg("x"), py::arg("mean"), py::arg("rstd"), py::arg("weight"),
        py::arg("normalized_shape"), py::arg("weight_grad"), py::arg("bias_grad"),
        py::arg("dh") = py::none());
  m.def("act_backward", &act_backward, "dy * act'(x)", py::arg("dy"), py::arg("x"),
        py::arg("act"));
  m.def("swiglu", &swiglu, "silu(a) * b", py::arg("a"), py::arg("b"));
  m.def("swiglu_backward", &swiglu_backward, "(da, db) of silu(a) * b", py::arg("dy"),
        py::arg("a"), py::arg("b"));
#ifndef KA_NO_TORCH_LIBRARY
  register_fast_path(m);
  m.def("op_softmax", [](const at::Tensor& x, bool log) { return op::softmax(x, log); });
  m.def("op_rms_norm", [](const at::Tensor& x, const Shape& shape, const OptTensor& w,
                          double eps) { return op::rms_norm(x, shape, w, eps); });
  m.def("op_layer_norm", [](const at::Tensor& x, const Shape& shape, const OptTensor& w,
                            const OptTensor& b, double eps) {
    return op::layer_norm(x, shape, w, b, eps);
  });
  m.def("op_add_rms_norm", [](const at::Tensor& x, const at::Tensor& residual,
                              const Shape& shape, const OptTensor& w, double eps) {
    return op::add_rms_norm(x, residual, shape, w, eps);
  });
  m.def("op_add_layer_norm", [](const at::Tensor& x, const at::Tensor& residual,
                                const Shape& shape, const OptTensor& w, const OptTensor& b,
                                double eps) {
    return op::add_layer_norm(x, residual, shape, w, b, eps);
  });
  m.def("op_act", [](const at::Tensor& x, int64_t act) { return op::act(x, act); });
  m.def("op_bias_act", [](const at::Tensor& x, const at::Tensor& bias, int64_t act) {
    return op::bias_act(x, bias, act);
  });
  m.def("op_swiglu", [](const at::Tensor& a, const at::Tensor& b) { return op::swiglu(a, b); });
  m.def("op_cross_entropy", [](const at::Tensor& logits, const at::Tensor& target,
                               int64_t ignore_index, int64_t reduction) {
    return op::cross_entropy(logits, target, ignore_index, reduction);
  });
#endif
}
