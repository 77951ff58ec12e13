// rms_norm and layer_norm forward over the last `cols` elements of each row.
//
// Bytes per call: rows * cols * sizeof(T) read + the same written, plus cols * sizeof(T) for
// each of weight and bias (read once from DRAM, then from L2 by every row) and
// rows * sizeof(acc) for each statistic written. Statistics accumulate in float (double for
// fp64); layer_norm takes the variance in a second pass over the cached row,
// sum((x - mean)^2) / cols, which does not cancel the way E[x^2] - mean^2 does.
#include "launchers.h"
#include "rowwise.h"

namespace ka {
namespace {

// The per-column factor and offset, read as the same vectors as the row.
template <typename T, int VEC>
__device__ __forceinline__ void load_param(const T* p, int i, acc_t<T> (&out)[VEC],
                                           acc_t<T> missing) {
  if (p == nullptr) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = missing;
    return;
  }
  const Vec<T, VEC> v = reinterpret_cast<const Vec<T, VEC>*>(p)[i];
#pragma unroll
  for (int j = 0; j < VEC; ++j) out[j] = to_acc(v.v[j]);
}

template <typename T>
bool all_aligned16(const T* x, const T* y, const T* weight, const T* bias) {
  return aligned16(x) && aligned16(y) && aligned16(weight) && aligned16(bias);  // null is aligned
}

template <typename T>
struct RmsNormRow {
  using elem_t = T;
  const T* x;
  T* y;
  const T* weight;
  acc_t<T>* rstd_out;
  acc_t<T> eps;

  bool aligned16() const { return all_aligned16<T>(x, y, weight, nullptr); }

  template <int VEC, typename G>
  __device__ void run(const G& g, const RowView<T, VEC>& row, acc_t<T>* scratch) const {
    using A = acc_t<T>;
    using V = Vec<T, VEC>;
    A sum_sq = 0;
    g.first_pass(row, [&](int i, const V& v) {
      if (row.cache != nullptr) row.cache[i] = v;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const A a = to_acc(v.v[j]);
        sum_sq += a * a;
      }
    });
    sum_sq = g.sum(sum_sq, scratch);
    const A rstd = static_cast<A>(1) / sqrt_acc(sum_sq / static_cast<A>(row.cols()) + eps);
    if (rstd_out != nullptr && g.rank == 0) rstd_out[g.row] = rstd;

    g.later_pass(row, [&](int i, const V& v) {
      A w[VEC];
      load_param<T, VEC>(weight, i, w, static_cast<A>(1));
      V out;
#pragma unroll
      for (int j = 0; j < VEC; ++j) out.v[j] = from_acc<T>(to_acc(v.v[j]) * rstd * w[j]);
      row.y[i] = out;
    });
  }
};

template <typename T>
struct LayerNormRow {
  using elem_t = T;
  const T* x;
  T* y;
  const T* weight;
  const T* bias;
  acc_t<T>* mean_out;
  acc_t<T>* rstd_out;
  acc_t<T> eps;

  bool aligned16() const { return all_aligned16<T>(x, y, weight, bias); }

  template <int VEC, typename G>
  __device__ void run(const G& g, const RowView<T, VEC>& row, acc_t<T>* scratch) const {
    using A = acc_t<T>;
    using V = Vec<T, VEC>;
    const A cols = static_cast<A>(row.cols());
    A sum = 0;
    g.first_pass(row, [&](int i, const V& v) {
      if (row.cache != nullptr) row.cache[i] = v;
#pragma unroll
      for (int j = 0; j < VEC; ++j) sum += to_acc(v.v[j]);
    });
    const A mean = g.sum(sum, scratch) / cols;

    A sum_sq_dev = 0;
    g.later_pass(row, [&](int, const V& v) {
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const A d = to_acc(v.v[j]) - mean;
        sum_sq_dev += d * d;
      }
    });
    const A var = g.sum(sum_sq_dev, scratch) / cols;
    const A rstd = static_cast<A>(1) / sqrt_acc(var + eps);
    if (g.rank == 0) {
      if (mean_out != nullptr) mean_out[g.row] = mean;
      if (rstd_out != nullptr) rstd_out[g.row] = rstd;
    }

    g.later_pass(row, [&](int i, const V& v) {
      A w[VEC];
      A b[VEC];
      load_param<T, VEC>(weight, i, w, static_cast<A>(1));
      load_param<T, VEC>(bias, i, b, static_cast<A>(0));
      V out;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        out.v[j] = from_acc<T>((to_acc(v.v[j]) - mean) * rstd * w[j] + b[j]);
      }
      row.y[i] = out;
    });
  }
};

}  // namespace

template <typename T>
void launch_rms_norm(const T* x, const T* weight, T* y, acc_t<T>* rstd_out, int64_t rows,
                     int64_t cols, double eps, cudaStream_t stream) {
  const RmsNormRow<T> op{x, y, weight, rstd_out, static_cast<acc_t<T>>(eps)};
  launch_rows(op, rows, cols, stream);
}

template <typename T>
void launch_layer_norm(const T* x, const T* weight, const T* bias, T* y, acc_t<T>* mean_out,
                       acc_t<T>* rstd_out, int64_t rows, int64_t cols, double eps,
                       cudaStream_t stream) {
  const LayerNormRow<T> op{x, y, weight, bias, mean_out, rstd_out, static_cast<acc_t<T>>(eps)};
  launch_rows(op, rows, cols, stream);
}

#define KA_INSTANTIATE_NORMS(T)                                                             \
  template void launch_rms_norm<T>(const T*, const T*, T*, acc_t<T>*, int64_t, int64_t,     \
                                   double, cudaStream_t);                                   \
  template void launch_layer_norm<T>(const T*, const T*, const T*, T*, acc_t<T>*,           \
                                     acc_t<T>*, int64_t, int64_t, double, cudaStream_t);

KA_INSTANTIATE_NORMS(float)
KA_INSTANTIATE_NORMS(double)
KA_INSTANTIATE_NORMS(__half)
KA_INSTANTIATE_NORMS(__nv_bfloat16)
#undef KA_INSTANTIATE_NORMS

}  // namespace ka
