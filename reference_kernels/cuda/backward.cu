// Backward of softmax / log_softmax, rms_norm and layer_norm over the last `cols` elements.
//
// The row kernels give each row to one warp (cols <= kWarpMaxCols) or one block, as the
// forward does (rowwise.h's RowGroup): a first pass reduces over the row, a second writes dx,
// re-reading the row's inputs from L1/L2. Bytes per call: softmax reads y and dy and writes dx
// (3 rows * cols * sizeof(T)); the norms' dx reads x and dy and writes dx (plus the per-row
// statistics), and their parameter gradients read x and dy again, column-parallel, into float
// partials per row chunk that a second kernel sums (rows * cols * 2 * sizeof(T) more). eager's
// CUDA norm backward moves the same bytes (its dx and gamma/beta kernels are separate too).
#include <algorithm>

#include "launchers.h"
#include "rowwise.h"

namespace ka {
namespace {

constexpr int kParamThreads = 256;

template <typename T, bool kLog>
struct SoftmaxBackwardRow {
  using elem_t = T;
  const T* y;
  const T* dy;
  T* dx;

  bool aligned16() const { return ka::aligned16(y) && ka::aligned16(dy) && ka::aligned16(dx); }

  template <int VEC, typename G>
  __device__ void run(const G& g, int n_vec, acc_t<T>* scratch) const {
    using A = acc_t<T>;
    using V = Vec<T, VEC>;
    const int64_t offset = g.row * n_vec;
    const V* yv = reinterpret_cast<const V*>(y) + offset;
    const V* dyv = reinterpret_cast<const V*>(dy) + offset;
    V* dxv = reinterpret_cast<V*>(dx) + offset;
    A dot = 0;  // sum(dy * y), or sum(dy) for log_softmax
    constexpr int kDepth = unroll_depth(sizeof(T));
    g.template for_each_vec2<kDepth>(dyv, kLog ? nullptr : yv, n_vec,
                                     [&](int, const V& d, const V& yy) {
      if constexpr (kLog) {
#pragma unroll
        for (int j = 0; j < VEC; ++j) dot += to_acc(d.v[j]);
      } else {
#pragma unroll
        for (int j = 0; j < VEC; ++j) dot += to_acc(d.v[j]) * to_acc(yy.v[j]);
      }
    });
    dot = g.sum(dot, scratch);
    g.template for_each_vec2<kDepth>(dyv, yv, n_vec, [&](int i, const V& d, const V& yy) {
      V out;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const A a = to_acc(yy.v[j]);
        const A dd = to_acc(d.v[j]);
        out.v[j] = from_acc<T>(kLog ? dd - exp_acc(a) * dot : a * (dd - dot));
      }
      dxv[i] = out;
    });
  }
};

// xhat = (x - mean) * rstd (mean 0 for rms_norm), g = dy * weight:
//   rms_norm:   dx = rstd * (g - xhat * mean(g * xhat))
//   layer_norm: dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
// plus `addend` where given: the gradient that reaches the normalized input by another path
// (the new residual h of add_rms_norm / add_layer_norm), added before the one rounding.
template <typename T>
struct NormBackwardRow {
  using elem_t = T;
  const T* x;
  const T* dy;
  const T* weight;
  const acc_t<T>* mean;  // null: rms_norm
  const acc_t<T>* rstd;
  const T* addend;  // may be null
  T* dx;

  bool aligned16() const {
    return ka::aligned16(x) && ka::aligned16(dy) && ka::aligned16(weight) &&
           ka::aligned16(addend) && ka::aligned16(dx);
  }

  template <int VEC, typename G>
  __device__ void run(const G& g, int n_vec, acc_t<T>* scratch) const {
    using A = acc_t<T>;
    using V = Vec<T, VEC>;
    const int64_t offset = g.row * n_vec;
    const V* xv = reinterpret_cast<const V*>(x) + offset;
    const V* dyv = reinterpret_cast<const V*>(dy) + offset;
    V* dxv = reinterpret_cast<V*>(dx) + offset;
    const A mu = mean == nullptr ? static_cast<A>(0) : mean[g.row];
    const A rs = rstd[g.row];
    A sum_g = 0;
    A sum_g_xhat = 0;
    constexpr int kDepth = unroll_depth(sizeof(T));
    g.template for_each_vec2<kDepth>(dyv, xv, n_vec, [&](int i, const V& d, const V& xx) {
      A w[VEC];
      load_param_vec<T, VEC>(weight, i, w);
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const A gj = to_acc(d.v[j]) * w[j];
        sum_g += gj;
        sum_g_xhat += gj * (to_acc(xx.v[j]) - mu) * rs;
      }
    });
    const A inv_cols = static_cast<A>(1) / static_cast<A>(n_vec * VEC);
    const A mean_g_xhat = g.sum(sum_g_xhat, scratch) * inv_cols;
    const A mean_g = mean == nullptr ? static_cast<A>(0) : g.sum(sum_g, scratch) * inv_cols;
    const V* addv = addend == nullptr ? nullptr : reinterpret_cast<const V*>(addend) + offset;
    g.template for_each_vec2<kDepth>(dyv, xv, n_vec, [&](int i, const V& d, const V& xx) {
      A w[VEC];
      load_param_vec<T, VEC>(weight, i, w);
      V add;
      if (addv != nullptr) add = addv[i];
      V out;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const A xhat = (to_acc(xx.v[j]) - mu) * rs;
        const A extra = addv != nullptr ? to_acc(add.v[j]) : static_cast<A>(0);
        out.v[j] = from_acc<T>(rs * (to_acc(d.v[j]) * w[j] - mean_g - xhat * mean_g_xhat) +
                               extra);
      }
      dxv[i] = out;
    });
  }
};

template <typename Op, int VEC, bool kWarpPerRow>
__global__ void __launch_bounds__(kMaxBlockThreads)
    backward_row_kernel(Op op, int64_t rows, int n_vec) {
  __shared__ acc_t<typename Op::elem_t> scratch[kWarpSize];
  const RowGroup<kWarpPerRow> g = this_row_group<kWarpPerRow>();
  if (g.row >= rows) return;  // whole warps only (warp path); the block path has `rows` blocks
  op.template run<VEC>(g, n_vec, scratch);
}

template <typename Op, int VEC>
void launch_backward_rows_vec(const Op& op, int64_t rows, int64_t cols, cudaStream_t stream) {
  const int n_vec = static_cast<int>(cols / VEC);
  if (cols <= kWarpMaxCols) {
    const auto grid = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
    backward_row_kernel<Op, VEC, true><<<grid, kWarpsPerBlock * kWarpSize, 0, stream>>>(
        op, rows, n_vec);
    return;
  }
  const unsigned threads =
      block_row_threads(n_vec, unroll_depth(sizeof(typename Op::elem_t)));
  backward_row_kernel<Op, VEC, false><<<static_cast<unsigned>(rows), threads, 0, stream>>>(
      op, rows, n_vec);
}

template <typename Op>
void launch_backward_rows(const Op& op, int64_t rows, int64_t cols, cudaStream_t stream) {
  constexpr int kVec = vec16_elems<typename Op::elem_t>();
  if (rows_take_vec16(op, cols)) {
    launch_backward_rows_vec<Op, kVec>(op, rows, cols, stream);
  } else {
    launch_backward_rows_vec<Op, 1>(op, rows, cols, stream);
  }
}

// Block (bx, by) of (tx, ty) threads: thread tx owns column vector bx * tx_n + tx and sums
// the rows r0 + ty, r0 + ty + ty_n, ... of row chunk by; the ty lanes then add up in shared
// memory and lane 0 writes the chunk's partial, or with a single chunk the T sums themselves
// (no partials, no second launch: a few rows cost what eager's two launches do).
template <typename T, int VEC>
__global__ void __launch_bounds__(kParamThreads)
    norm_param_partial_kernel(const T* __restrict__ x, const T* __restrict__ dy,
                              const acc_t<T>* mean, const acc_t<T>* rstd,
                              acc_t<T>* dweight_partial, acc_t<T>* dbias_partial, T* dweight,
                              T* dbias, int64_t rows, int n_vec, int64_t rows_per_chunk) {
  using A = acc_t<T>;
  using V = Vec<T, VEC>;
  __shared__ A lanes[2][kParamThreads * VEC];
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  const int64_t first = static_cast<int64_t>(blockIdx.y) * rows_per_chunk;
  const int64_t last = std::min<int64_t>(rows, first + rows_per_chunk);
  A dw[VEC] = {};
  A db[VEC] = {};
  if (col < n_vec) {
#pragma unroll 4
    for (int64_t r = first + threadIdx.y; r < last; r += blockDim.y) {
      const V xx = reinterpret_cast<const V*>(x)[r * n_vec + col];
      const V d = reinterpret_cast<const V*>(dy)[r * n_vec + col];
      const A mu = mean == nullptr ? static_cast<A>(0) : mean[r];
      const A rs = rstd[r];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const A dd = to_acc(d.v[j]);
        dw[j] += dd * (to_acc(xx.v[j]) - mu) * rs;
        db[j] += dd;
      }
    }
  }
  const int lane = (threadIdx.y * blockDim.x + threadIdx.x) * VEC;
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    lanes[0][lane + j] = dw[j];
    lanes[1][lane + j] = db[j];
  }
  __syncthreads();
  if (threadIdx.y != 0 || col >= n_vec) return;
  for (int k = 1; k < static_cast<int>(blockDim.y); ++k) {
    const int other = (k * blockDim.x + threadIdx.x) * VEC;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      dw[j] += lanes[0][other + j];
      db[j] += lanes[1][other + j];
    }
  }
  const int64_t out = static_cast<int64_t>(blockIdx.y) * n_vec * VEC + static_cast<int64_t>(col) * VEC;
  if (gridDim.y == 1) {  // one chunk: these are the sums
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      dweight[out + j] = from_acc<T>(dw[j]);
      if (dbias != nullptr) dbias[out + j] = from_acc<T>(db[j]);
    }
    return;
  }
#pragma unroll
  for (int j = 0; j < VEC; ++j) {
    dweight_partial[out + j] = dw[j];
    if (dbias != nullptr) dbias_partial[out + j] = db[j];
  }
}

// out[c] = sum over chunks k of partial[k, c]: 32 columns per block, 8 lanes over the chunks;
// blockIdx.y picks dweight (0) or dbias (1), so both sums take one launch.
constexpr int kSumCols = 32;
constexpr int kSumLanes = 8;

template <typename T>
__global__ void __launch_bounds__(kSumCols * kSumLanes)
    sum_partials_kernel(const acc_t<T>* dw_partial, T* dw, const acc_t<T>* db_partial, T* db,
                        int64_t chunks, int64_t cols) {
  using A = acc_t<T>;
  __shared__ A lanes[kSumLanes][kSumCols];
  const acc_t<T>* partial = blockIdx.y == 0 ? dw_partial : db_partial;
  T* out = blockIdx.y == 0 ? dw : db;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kSumCols + threadIdx.x;
  A s = 0;
  if (col < cols) {
    for (int64_t k = threadIdx.y; k < chunks; k += kSumLanes) s += partial[k * cols + col];
  }
  lanes[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y != 0 || col >= cols) return;
#pragma unroll
  for (int k = 1; k < kSumLanes; ++k) s += lanes[k][threadIdx.x];
  out[col] = from_acc<T>(s);
}

// Threads across the columns (a warp multiple up to 256) and down the rows of a chunk.
struct ParamPlan {
  int tx;
  int ty;
  int grid_x;
};

ParamPlan param_plan(int64_t n_vec) {
  const int tx = static_cast<int>(
      std::min<int64_t>(kParamThreads, (n_vec + kWarpSize - 1) / kWarpSize * kWarpSize));
  return {tx, kParamThreads / tx, static_cast<int>((n_vec + tx - 1) / tx)};
}

template <typename T, int VEC>
void launch_norm_params_vec(const T* x, const T* dy, const acc_t<T>* mean, const acc_t<T>* rstd,
                            acc_t<T>* dw_part, acc_t<T>* db_part, T* dw, T* db, int64_t rows,
                            int64_t cols, cudaStream_t stream) {
  const int64_t n_vec = cols / VEC;
  const ParamPlan p = param_plan(n_vec);
  const int64_t chunks = norm_param_chunks(rows, cols);
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  norm_param_partial_kernel<T, VEC><<<dim3(p.grid_x, static_cast<unsigned>(chunks)),
                                      dim3(p.tx, p.ty), 0, stream>>>(
      x, dy, mean, rstd, dw_part, db_part, dw, db, rows, static_cast<int>(n_vec), rows_per_chunk);
  if (chunks == 1) return;  // the partial kernel wrote dweight (and dbias) itself
  // dweight is always asked for here (a bias gradient alone takes the eager sum).
  const dim3 sum_grid(static_cast<unsigned>((cols + kSumCols - 1) / kSumCols),
                      db != nullptr ? 2 : 1);
  const dim3 sum_block(kSumCols, kSumLanes);
  sum_partials_kernel<T><<<sum_grid, sum_block, 0, stream>>>(dw_part, dw, db_part, db, chunks,
                                                             cols);
}

}  // namespace

int64_t norm_param_chunks(int64_t rows, int64_t cols) {
  // About eight 256-thread blocks per SM in all (a full SM: the partial kernel is a stream of
  // loads, and fewer blocks left DRAM waiting on latency), each chunk at least kMinChunkRows
  // rows; at most 65535 (gridDim.y). Up to kMinChunkRows rows take one chunk: one launch, no
  // partials (a second launch costs more host time than the split saves).
  constexpr int64_t kMinChunkRows = 16;
  const int64_t grid_x = param_plan(cols).grid_x;  // the scalar path's; the vector path has fewer
  const int64_t want = std::max<int64_t>(1, 8 * device_sm_count() / grid_x);
  return std::max<int64_t>(
      1, std::min<int64_t>({want, (rows + kMinChunkRows - 1) / kMinChunkRows, 65535}));
}

template <typename T>
void launch_sum_partials(const acc_t<T>* first_partial, T* first, const acc_t<T>* second_partial,
                         T* second, int64_t chunks, int64_t cols, cudaStream_t stream) {
  const dim3 sum_grid(static_cast<unsigned>((cols + kSumCols - 1) / kSumCols),
                      second != nullptr ? 2 : 1);
  sum_partials_kernel<T><<<sum_grid, dim3(kSumCols, kSumLanes), 0, stream>>>(
      first_partial, first, second_partial, second, chunks, cols);
}

template <typename T>
void launch_softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols,
                             bool log, cudaStream_t stream) {
  if (log) {
    launch_backward_rows(SoftmaxBackwardRow<T, true>{y, dy, dx}, rows, cols, stream);
  } else {
    launch_backward_rows(SoftmaxBackwardRow<T, false>{y, dy, dx}, rows, cols, stream);
  }
}

template <typename T>
void launch_norm_backward_dx(const T* x, const T* dy, const T* weight, const acc_t<T>* mean,
                             const acc_t<T>* rstd, const T* addend, T* dx, int64_t rows,
                             int64_t cols, cudaStream_t stream) {
  launch_backward_rows(NormBackwardRow<T>{x, dy, weight, mean, rstd, addend, dx}, rows, cols,
                       stream);
}

template <typename T>
void launch_norm_backward_params(const T* x, const T* dy, const acc_t<T>* mean,
                                 const acc_t<T>* rstd, acc_t<T>* dweight_partial,
                                 acc_t<T>* dbias_partial, T* dweight, T* dbias, int64_t rows,
                                 int64_t cols, cudaStream_t stream) {
  constexpr int kVec = vec16_elems<T>();
  if (aligned16(x) && aligned16(dy) && (cols * static_cast<int64_t>(sizeof(T))) % kVecBytes == 0) {
    launch_norm_params_vec<T, kVec>(x, dy, mean, rstd, dweight_partial, dbias_partial, dweight,
                                    dbias, rows, cols, stream);
  } else {
    launch_norm_params_vec<T, 1>(x, dy, mean, rstd, dweight_partial, dbias_partial, dweight,
                                 dbias, rows, cols, stream);
  }
}

#define KA_INSTANTIATE_BACKWARD(T)                                                            \
  template void launch_softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t, bool,    \
                                           cudaStream_t);                                     \
  template void launch_norm_backward_dx<T>(const T*, const T*, const T*, const acc_t<T>*,     \
                                           const acc_t<T>*, const T*, T*, int64_t, int64_t,   \
                                           cudaStream_t);                                     \
  template void launch_norm_backward_params<T>(const T*, const T*, const acc_t<T>*,           \
                                               const acc_t<T>*, acc_t<T>*, acc_t<T>*, T*, T*, \
                                               int64_t, int64_t, cudaStream_t);                 \
  template void launch_sum_partials<T>(const acc_t<T>*, T*, const acc_t<T>*, T*, int64_t,     \
                                       int64_t, cudaStream_t);

KA_INSTANTIATE_BACKWARD(float)
KA_INSTANTIATE_BACKWARD(double)
KA_INSTANTIATE_BACKWARD(__half)
KA_INSTANTIATE_BACKWARD(__nv_bfloat16)
#undef KA_INSTANTIATE_BACKWARD

}  // namespace ka
