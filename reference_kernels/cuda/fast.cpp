// The Python wrappers' fast path (module attribute `fast`): each function checks its arguments
// here, in C++, and either calls the advisor_cuda operator or returns None without raising, in
// which case the wrapper takes its checked Python path, which names the problem and the fix.
// A call that the kernels take therefore runs no Python validation: about 1-5 us of host time
// per call, which at small shapes is the difference from eager.
//
// Nothing here throws on bad input: the checks only read tensor metadata.
#ifndef KA_NO_TORCH_LIBRARY

#include <limits>
#include <optional>
#include <vector>

#include <torch/extension.h>

#include "operators.h"

namespace ka_torch {
namespace {

namespace py = pybind11;
using OptTensor = std::optional<at::Tensor>;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

bool float_type(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16 || t == at::kDouble;
}

// What check_x (tensors.h) and _checks.check_input ask of x, without raising.
bool usable(const at::Tensor& x) {
  return x.defined() && x.is_cuda() && float_type(x.scalar_type()) && x.dim() >= 1 &&
         x.is_contiguous() && x.size(-1) <= kInt32Max;
}

bool like(const at::Tensor& t, const at::Tensor& x) {
  return t.defined() && t.device() == x.device() && t.scalar_type() == x.scalar_type() &&
         t.sizes() == x.sizes() && t.is_contiguous();
}

bool param_ok(const OptTensor& p, const at::Tensor& x, at::IntArrayRef shape) {
  return !p.has_value() || (p->defined() && p->device() == x.device() &&
                            p->scalar_type() == x.scalar_type() && p->sizes() == shape &&
                            p->is_contiguous());
}

// normalized_shape as an int or a list/tuple of ints naming x's trailing dims, whose product
// and the row count fit in int32; nullopt otherwise.
std::optional<std::vector<int64_t>> normalized_shape(py::handle shape, const at::Tensor& x) {
  std::vector<int64_t> dims;
  if (PyLong_Check(shape.ptr())) {
    dims.push_back(PyLong_AsLongLong(shape.ptr()));
  } else if (PyList_Check(shape.ptr()) || PyTuple_Check(shape.ptr())) {
    for (py::handle d : shape) {
      if (!PyLong_Check(d.ptr())) return std::nullopt;
      dims.push_back(PyLong_AsLongLong(d.ptr()));
    }
  } else {
    return std::nullopt;
  }
  if (PyErr_Occurred() != nullptr) {  // an int beyond int64
    PyErr_Clear();
    return std::nullopt;
  }
  const auto k = static_cast<int64_t>(dims.size());
  if (k < 1 || k > x.dim() || x.sizes().slice(x.dim() - k) != at::IntArrayRef(dims)) {
    return std::nullopt;
  }
  int64_t cols = 1;
  for (const int64_t d : dims) cols *= d;
  if (cols > kInt32Max || (cols > 0 && x.numel() / cols > kInt32Max)) return std::nullopt;
  return dims;
}

bool rows_fit(const at::Tensor& x) {
  return x.size(-1) == 0 || x.numel() / x.size(-1) <= kInt32Max;
}

py::object softmax(const at::Tensor& x, int64_t dim, bool log) {
  if (!usable(x) || !rows_fit(x) || (dim != -1 && dim != x.dim() - 1)) return py::none();
  return py::cast(op::softmax(x, log));
}

// F.rms_norm's default eps: the machine epsilon of x's dtype.
double eps_or_default(std::optional<double> eps, const at::Tensor& x) {
  if (eps.has_value()) return *eps;
  switch (x.scalar_type()) {
    case at::kHalf: return static_cast<float>(std::numeric_limits<c10::Half>::epsilon());
    case at::kBFloat16: return static_cast<float>(std::numeric_limits<c10::BFloat16>::epsilon());
    case at::kDouble: return std::numeric_limits<double>::epsilon();
    default: return std::numeric_limits<float>::epsilon();
  }
}

py::object rms_norm(const at::Tensor& x, py::handle shape, const OptTensor& weight,
                    std::optional<double> eps) {
  if (!usable(x)) return py::none();
  const auto dims = normalized_shape(shape, x);
  if (!dims || !param_ok(weight, x, *dims)) return py::none();
  return py::cast(op::rms_norm(x, *dims, weight, eps_or_default(eps, x)));
}

py::object layer_norm(const at::Tensor& x, py::handle shape, const OptTensor& weight,
                      const OptTensor& bias, double eps) {
  if (!usable(x)) return py::none();
  const auto dims = normalized_shape(shape, x);
  if (!dims || !param_ok(weight, x, *dims) || !param_ok(bias, x, *dims)) return py::none();
  return py::cast(op::layer_norm(x, *dims, weight, bias, eps));
}

py::object add_rms_norm(const at::Tensor& x, const at::Tensor& residual, py::handle shape,
                        const OptTensor& weight, std::optional<double> eps) {
  if (!usable(x) || !like(residual, x)) return py::none();
  const auto dims = normalized_shape(shape, x);
  if (!dims || !param_ok(weight, x, *dims)) return py::none();
  return py::cast(op::add_rms_norm(x, residual, *dims, weight, eps_or_default(eps, x)));
}

py::object add_layer_norm(const at::Tensor& x, const at::Tensor& residual, py::handle shape,
                          const OptTensor& weight, const OptTensor& bias, double eps) {
  if (!usable(x) || !like(residual, x)) return py::none();
  const auto dims = normalized_shape(shape, x);
  if (!dims || !param_ok(weight, x, *dims) || !param_ok(bias, x, *dims)) return py::none();
  return py::cast(op::add_layer_norm(x, residual, *dims, weight, bias, eps));
}

py::object act(const at::Tensor& x, int64_t act) {
  if (!usable(x) || act < 0 || act > 3) return py::none();
  return py::cast(op::act(x, act));
}

py::object swiglu(const at::Tensor& a, const at::Tensor& b) {
  if (!usable(a) || !like(b, a)) return py::none();
  return py::cast(op::swiglu(a, b));
}

py::object cross_entropy(const at::Tensor& logits, const at::Tensor& target,
                         int64_t ignore_index, int64_t reduction) {
  if (!usable(logits) || logits.dim() != 2 || logits.size(1) < 1 || logits.size(0) > kInt32Max ||
      reduction < 0 || reduction > 2 || !target.defined() || target.scalar_type() != at::kLong ||
      target.dim() != 1 || target.size(0) != logits.size(0) || !target.is_contiguous() ||
      target.device() != logits.device()) {
    return py::none();
  }
  return py::cast(op::cross_entropy(logits, target, ignore_index, reduction));
}

}  // namespace

void register_fast_path(py::module_& m) {
  py::module_ fast = m.def_submodule("fast", "checked calls that return None instead of raising");
  fast.def("softmax", &softmax);
  fast.def("rms_norm", &rms_norm);
  fast.def("layer_norm", &layer_norm);
  fast.def("add_rms_norm", &add_rms_norm);
  fast.def("add_layer_norm", &add_layer_norm);
  fast.def("act", &act);
  fast.def("swiglu", &swiglu);
  fast.def("cross_entropy", &cross_entropy);
}

}  // namespace ka_torch

#endif  // KA_NO_TORCH_LIBRARY
