// Softmax over the last dim: y = exp(x - max(x)) / sum(exp(x - max(x))) per row, and
// log_softmax: y = x - max(x) - log(sum(exp(x - max(x)))).
//
// Bytes per call: rows * cols * sizeof(T) read + the same written (the row cache in shared
// memory makes the max, sum and write passes read DRAM once). Two exp per element (sum pass
// and write pass) rather than an online max/sum with three: the exp unit stays well under
// its limit at DRAM speed.
//
// NB: for fp16/bf16 outputs exp(x - max) is exp2(x * log2e - max * log2e), one FFMA and one
// ex2 (2 ulp): the argument's rounding, |x * log2e| * 2^-24, keeps the relative error near
// 1e-6 for the terms that matter (x - max > -20), far under half an ulp of fp16 (2.4e-4) or
// bf16 (2e-3); the library expf costs several times the instructions, which a 16-bit row
// (twice the elements per byte of fp32) cannot afford at DRAM speed. fp32/fp64 keep exp.
#include "launchers.h"
#include "rowwise.h"

namespace ka {
namespace {

template <typename T, bool kLog>
struct SoftmaxRow {
  using elem_t = T;
  const T* x;
  T* y;

  bool aligned16() const { return ka::aligned16(x) && ka::aligned16(y); }

  template <int VEC, typename G>
  __device__ void run(const G& g, const RowView<T, VEC>& row, acc_t<T>* scratch) const {
    using A = acc_t<T>;
    using V = Vec<T, VEC>;
    A row_max;
    A row_sum;
    row_max_and_sum_exp(g, row, scratch, row_max, row_sum);
    const ShiftedExp<T> shifted_exp{row_max};
    const A inv_sum = static_cast<A>(1) / row_sum;
    const A shift = row_max + log_acc(row_sum);  // log_softmax: y = x - shift
    g.later_pass(row, [&](int i, const V& v) {
      V out;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const A a = to_acc(v.v[j]);
        out.v[j] = from_acc<T>(kLog ? a - shift : shifted_exp(a) * inv_sum);
      }
      row.y[i] = out;
    });
  }
};

}  // namespace

template <typename T>
void launch_softmax(const T* x, T* y, int64_t rows, int64_t cols, bool log, cudaStream_t stream) {
  if (log) {
    launch_rows(SoftmaxRow<T, true>{x, y}, rows, cols, stream);
  } else {
    launch_rows(SoftmaxRow<T, false>{x, y}, rows, cols, stream);
  }
}

#define KA_INSTANTIATE_SOFTMAX(T) \
  template void launch_softmax<T>(const T*, T*, int64_t, int64_t, bool, cudaStream_t);

KA_INSTANTIATE_SOFTMAX(float)
KA_INSTANTIATE_SOFTMAX(double)
KA_INSTANTIATE_SOFTMAX(__half)
KA_INSTANTIATE_SOFTMAX(__nv_bfloat16)
#undef KA_INSTANTIATE_SOFTMAX

}  // namespace ka
