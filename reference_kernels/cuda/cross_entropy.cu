// Cross-entropy of (rows, cols) logits against class targets, and its gradient.
//
// Forward: the row skeleton (rowwise.h) reads each row once (a max pass that also caches the
// row, then the sum of exp over the cache); the row's first thread writes lse = max + log(sum)
// and the loss lse - x[target] (0 for ignore_index, NaN for a target outside [0, cols), where
// eager raises a device assert). 'mean' and 'sum' then add the rows' losses in one block, which
// also counts the targets not ignored.
// Backward: dx = (exp(x - lse) - [c == target]) * scale, with scale the upstream gradient
// (divided by that count for 'mean', 0 for ignored rows).
// Bytes: forward rows * cols * sizeof(T) read + 16 B per row (target, lse, loss); backward
// reads the logits and writes dx, 2 * rows * cols * sizeof(T), + 16 B per row.
#include <algorithm>
#include <cmath>

#include "launchers.h"
#include "rowwise.h"

namespace ka {
namespace {

constexpr int kReduceThreads = 1024;
constexpr int kBackwardThreads = 256;
constexpr int kBackwardVecsPerThread = 4;

template <typename A>
__device__ __forceinline__ A quiet_nan() {
  return static_cast<A>(NAN);
}

template <typename T>
struct CrossEntropyRow {
  using elem_t = T;
  const T* x;
  T* y;  // the skeleton's output row: never written (the forward has no row output)
  const int64_t* target;
  int64_t ignore_index;
  acc_t<T>* lse;
  acc_t<T>* row_loss;  // 'mean' / 'sum': per-row losses for the reduction; else null
  T* loss;             // 'none': the losses in x's dtype; else null

  bool aligned16() const { return ka::aligned16(x); }

  template <int VEC, typename G>
  __device__ void run(const G& g, const RowView<T, VEC>& row, acc_t<T>* scratch) const {
    using A = acc_t<T>;
    A row_max;
    A row_sum;
    row_max_and_sum_exp(g, row, scratch, row_max, row_sum);  // every thread takes part
    if (g.rank != 0) return;
    const int64_t cols = row.cols();
    const A row_lse = row_max + log_acc(row_sum);
    lse[g.row] = row_lse;
    const int64_t t = target[g.row];
    A l = 0;
    if (t != ignore_index) {
      l = t < 0 || t >= cols ? quiet_nan<A>() : row_lse - to_acc(x[g.row * cols + t]);
    }
    if (row_loss != nullptr) {
      row_loss[g.row] = l;
    } else {
      loss[g.row] = from_acc<T>(l);
    }
  }
};

// loss[0] = the rows' losses summed (divided by the count of targets not ignored for 'mean',
// 0 / 0 = NaN when all are, as eager); count[0] = that count.
// NB: the count is kept in the accumulation type: exact up to 2^24 rows in float.
template <typename T>
__global__ void __launch_bounds__(kReduceThreads)
    reduce_losses_kernel(const acc_t<T>* row_loss, const int64_t* target, int64_t ignore_index,
                         int64_t rows, bool mean, T* loss, acc_t<T>* count) {
  using A = acc_t<T>;
  __shared__ A scratch[kWarpSize];
  A sum = 0;
  A n = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    sum += row_loss[r];
    n += target[r] != ignore_index ? static_cast<A>(1) : static_cast<A>(0);
  }
  sum = block_reduce<false>(sum, scratch);
  n = block_reduce<false>(n, scratch);
  if (threadIdx.x != 0) return;
  loss[0] = from_acc<T>(mean ? sum / n : sum);
  count[0] = n;
}

// Block (row, chunk): kBackwardVecsPerThread vectors of one row per thread, all loaded first.
template <typename T, int VEC>
__global__ void __launch_bounds__(kBackwardThreads)
    cross_entropy_backward_kernel(const T* x, const int64_t* target, const acc_t<T>* lse,
                                  const T* dloss, const acc_t<T>* count, T* dx, int n_vec,
                                  int64_t ignore_index, Reduction reduction) {
  using A = acc_t<T>;
  using V = Vec<T, VEC>;
  const int64_t row = blockIdx.x;
  const int64_t cols = static_cast<int64_t>(n_vec) * VEC;
  const int64_t t = target[row];
  A scale = 0;
  if (t != ignore_index) {
    if (t < 0 || t >= cols) {
      scale = quiet_nan<A>();
    } else if (reduction == Reduction::kNone) {
      scale = to_acc(dloss[row]);
    } else {
      scale = to_acc(dloss[0]);
      if (reduction == Reduction::kMean) scale /= count[0];
    }
  }
  const ShiftedExp<T> shifted_exp{lse[row]};  // exp(x - lse)
  const V* xv = reinterpret_cast<const V*>(x) + row * n_vec;
  V* dxv = reinterpret_cast<V*>(dx) + row * n_vec;
  const int first = blockIdx.y * blockDim.x * kBackwardVecsPerThread + threadIdx.x;
  V v[kBackwardVecsPerThread];
#pragma unroll
  for (int u = 0; u < kBackwardVecsPerThread; ++u) {
    const int i = first + u * blockDim.x;
    if (i < n_vec) v[u] = xv[i];
  }
#pragma unroll
  for (int u = 0; u < kBackwardVecsPerThread; ++u) {
    const int i = first + u * blockDim.x;
    if (i >= n_vec) continue;
    V out;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const A hit = static_cast<int64_t>(i) * VEC + j == t ? static_cast<A>(1) : static_cast<A>(0);
      out.v[j] = from_acc<T>((shifted_exp(to_acc(v[u].v[j])) - hit) * scale);
    }
    dxv[i] = out;
  }
}

template <typename T, int VEC>
void launch_backward_vec(const T* x, const int64_t* target, const acc_t<T>* lse, const T* dloss,
                         const acc_t<T>* count, T* dx, int64_t rows, int64_t cols,
                         int64_t ignore_index, Reduction reduction, cudaStream_t stream) {
  const int64_t n_vec = cols / VEC;
  const int64_t want = (n_vec + kBackwardVecsPerThread - 1) / kBackwardVecsPerThread;
  const int64_t threads = std::min<int64_t>(kBackwardThreads,
                                            (want + kWarpSize - 1) / kWarpSize * kWarpSize);
  const int64_t per_block = threads * kBackwardVecsPerThread;
  const dim3 grid(static_cast<unsigned>(rows), static_cast<unsigned>((n_vec + per_block - 1) /
                                                                      per_block));
  cross_entropy_backward_kernel<T, VEC><<<grid, static_cast<unsigned>(threads), 0, stream>>>(
      x, target, lse, dloss, count, dx, static_cast<int>(n_vec), ignore_index, reduction);
}

}  // namespace

template <typename T>
void launch_cross_entropy(const T* x, const int64_t* target, int64_t ignore_index,
                          acc_t<T>* lse, acc_t<T>* row_loss, T* loss, acc_t<T>* count,
                          int64_t rows, int64_t cols, Reduction reduction, cudaStream_t stream) {
  const bool reduce = reduction != Reduction::kNone;
  const CrossEntropyRow<T> op{x, const_cast<T*>(x), target, ignore_index, lse,
                              reduce ? row_loss : nullptr, reduce ? nullptr : loss};
  launch_rows(op, rows, cols, stream);
  if (reduce) {
    reduce_losses_kernel<T><<<1, kReduceThreads, 0, stream>>>(
        row_loss, target, ignore_index, rows, reduction == Reduction::kMean, loss, count);
  }
}

template <typename T>
void launch_cross_entropy_backward(const T* x, const int64_t* target, const acc_t<T>* lse,
                                   const T* dloss, const acc_t<T>* count, T* dx, int64_t rows,
                                   int64_t cols, int64_t ignore_index, Reduction reduction,
                                   cudaStream_t stream) {
  constexpr int kVec = vec16_elems<T>();
  if (aligned16(x) && aligned16(dx) && (cols * static_cast<int64_t>(sizeof(T))) % kVecBytes == 0) {
    launch_backward_vec<T, kVec>(x, target, lse, dloss, count, dx, rows, cols, ignore_index,
                                 reduction, stream);
  } else {
    launch_backward_vec<T, 1>(x, target, lse, dloss, count, dx, rows, cols, ignore_index,
                              reduction, stream);
  }
}

#define KA_INSTANTIATE_CROSS_ENTROPY(T)                                                       \
  template void launch_cross_entropy<T>(const T*, const int64_t*, int64_t, acc_t<T>*,          \
                                        acc_t<T>*, T*, acc_t<T>*, int64_t, int64_t, Reduction, \
                                        cudaStream_t);                                        \
  template void launch_cross_entropy_backward<T>(const T*, const int64_t*, const acc_t<T>*,   \
                                                 const T*, const acc_t<T>*, T*, int64_t,      \
                                                 int64_t, int64_t, Reduction, cudaStream_t);

KA_INSTANTIATE_CROSS_ENTROPY(float)
KA_INSTANTIATE_CROSS_ENTROPY(double)
KA_INSTANTIATE_CROSS_ENTROPY(__half)
KA_INSTANTIATE_CROSS_ENTROPY(__nv_bfloat16)
#undef KA_INSTANTIATE_CROSS_ENTROPY

}  // namespace ka
