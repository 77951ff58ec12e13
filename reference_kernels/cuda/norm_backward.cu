// The fused backward of rms_norm and layer_norm: dx and the weight/bias gradients from one read
// of x and dy.
//
// A persistent grid (the blocks the device holds at once, i.e. ~#SMs x blocks per SM) walks
// the rows round-robin (block b takes rows b, b + gridDim.x, ...: at any time the blocks
// stream neighbouring rows). Thread t owns the same column vectors t + k * blockDim.x
// (k < K) of every row, so it keeps their dweight = sum(dy * xhat) and dbias = sum(dy) in
// float registers across rows; at the end each block writes one float partial row, and
// sum_partials_kernel (backward.cu) adds the [blocks, cols] partials into the T outputs.
//
// Bytes per call: x and dy read once, dx written once (3 * rows * cols * sizeof(T)), the
// forward's per-row statistics (4 or 8 bytes a row), the weight once per block (from L2), and
// the partials: blocks * cols * 4 bytes written and read back once per gradient (~1 MB per
// gradient at 132 blocks x 8192 columns against 201 MB of rows at 4096 x 8192 bf16). The
// two-kernel path (backward.cu: dx, then a column-parallel pass) reads x and dy twice: 5
// row streams instead of 3. Rows the fused kernel does not take (more than kMaxVecsPerThread
// vectors a thread at kFusedThreads) keep that path.
#include <algorithm>

#include "launchers.h"
#include "rowwise.h"

namespace ka {
namespace {

constexpr int kFusedThreads = 512;
// Columns per thread: each costs a float accumulator per gradient (dweight, dbias), so at
// most kMaxColsPerThread (1, 2, 4 or 8 vectors); with kHoldCols or fewer the thread also keeps
// its x and dy in registers between the reduction and the dx pass, otherwise the dx pass
// re-reads them (from L1 in practice: a block's row is at most 2 * 16384 * 4 bytes). NB: sized
// by ptxas -v for sm_90 under the 128-register cap of 512 threads: holding 32 bf16 columns, or
// 64 float columns a thread, spilled (0.5-3 KB a thread); these limits compile without spills.
constexpr int kMaxVecsPerThread = 8;
constexpr int kMaxColsPerThread = 32;
constexpr int kHoldCols = 16;
constexpr int kDepthLoads = 2;  // vectors of x and dy in flight a thread when not held

// Both row sums through one set of block barriers.
template <typename A>
__device__ void block_sum2(A& a, A& b, A (*scratch)[kWarpSize]) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int n_warps = blockDim.x / kWarpSize;
  a = warp_sum(a);
  b = warp_sum(b);
  __syncthreads();  // the previous row's readers of scratch are done
  if (lane == 0) {
    scratch[0][warp] = a;
    scratch[1][warp] = b;
  }
  __syncthreads();
  a = 0;
  b = 0;
  for (int w = 0; w < n_warps; ++w) {  // every thread adds the warps in the same order
    a += scratch[0][w];
    b += scratch[1][w];
  }
}

template <typename T>
struct FusedArgs {
  const T* x;
  const T* dy;
  const T* weight;        // null: no weight (1)
  const acc_t<T>* mean;   // null: rms_norm
  const acc_t<T>* rstd;
  const T* addend;        // null: none (else the add_ forms' dh, added to dx)
  T* dx;
  acc_t<T>* dw_part;      // [gridDim.x, cols] float partials (unused with one block)
  acc_t<T>* db_part;
  T* dw;                  // null: no weight gradient; one block writes it itself
  T* db;                  // the bias gradient when kBias
  int64_t rows;
  int n_vec;
};

template <typename T, int VEC, int K, bool kBias>
__global__ void __launch_bounds__(kFusedThreads)
    norm_backward_fused_kernel(const FusedArgs<T> p) {
  using A = acc_t<T>;
  using V = Vec<T, VEC>;
  constexpr bool kHold = K * VEC <= kHoldCols;
  constexpr int kDepth = kHold ? K : kDepthLoads;
  __shared__ A scratch[2][kWarpSize];
  const V* xv = reinterpret_cast<const V*>(p.x);
  const V* dyv = reinterpret_cast<const V*>(p.dy);
  const V* addv = reinterpret_cast<const V*>(p.addend);
  V* dxv = reinterpret_cast<V*>(p.dx);
  const int n_vec = p.n_vec;
  const A inv_cols = static_cast<A>(1) / static_cast<A>(n_vec * VEC);
  A dw[K][VEC] = {};
  A db[kBias ? K : 1][VEC] = {};
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t offset = row * n_vec;
    V xs[kHold ? K : 1];
    V ds[kHold ? K : 1];
    const A mu = p.mean == nullptr ? static_cast<A>(0) : p.mean[row];
    const A rs = p.rstd[row];
    A sum_g = 0;
    A sum_g_xhat = 0;
    // kDepth vectors of x and dy loaded before the first is used: all K when they stay in
    // registers (2 * K * 16 bytes in flight a thread), else kDepthLoads at a time
#pragma unroll
    for (int k0 = 0; k0 < K; k0 += kDepth) {
      V xl[kDepth];
      V dl[kDepth];
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        const int i = threadIdx.x + (k0 + u) * blockDim.x;
        if (i < n_vec) {
          xl[u] = xv[offset + i];
          dl[u] = dyv[offset + i];
        }
      }
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        const int i = threadIdx.x + (k0 + u) * blockDim.x;
        if (i >= n_vec) continue;
        A w[VEC];
        load_param_vec<T, VEC>(p.weight, i, w);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
          const A g = to_acc(dl[u].v[j]) * w[j];
          sum_g += g;
          sum_g_xhat += g * (to_acc(xl[u].v[j]) - mu) * rs;
        }
        if constexpr (kHold) {
          xs[k0 + u] = xl[u];
          ds[k0 + u] = dl[u];
        }
      }
    }
    block_sum2(sum_g, sum_g_xhat, scratch);
    const A mean_g = p.mean == nullptr ? static_cast<A>(0) : sum_g * inv_cols;
    const A mean_g_xhat = sum_g_xhat * inv_cols;
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int i = threadIdx.x + k * blockDim.x;
      if (i >= n_vec) continue;
      V xx;
      V d;
      if constexpr (kHold) {
        xx = xs[k];
        d = ds[k];
      } else {
        xx = xv[offset + i];
        d = dyv[offset + i];
      }
      A w[VEC];
      load_param_vec<T, VEC>(p.weight, i, w);
      V add;
      if (addv != nullptr) add = addv[offset + i];
      V out;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        const A dd = to_acc(d.v[j]);
        const A xhat = (to_acc(xx.v[j]) - mu) * rs;
        const A extra = addv != nullptr ? to_acc(add.v[j]) : static_cast<A>(0);
        out.v[j] = from_acc<T>(rs * (dd * w[j] - mean_g - xhat * mean_g_xhat) + extra);
        dw[k][j] += dd * xhat;
        if constexpr (kBias) db[k][j] += dd;
      }
      dxv[offset + i] = out;
    }
  }
  const bool direct = gridDim.x == 1;  // one block: its sums are the gradients
  const int64_t base = static_cast<int64_t>(blockIdx.x) * n_vec * VEC;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const int i = threadIdx.x + k * blockDim.x;
    if (i >= n_vec) continue;
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      const int64_t c = static_cast<int64_t>(i) * VEC + j;
      if (p.dw != nullptr) {
        if (direct) {
          p.dw[c] = from_acc<T>(dw[k][j]);
        } else {
          p.dw_part[base + c] = dw[k][j];
        }
      }
      if constexpr (kBias) {
        if (direct) {
          p.db[c] = from_acc<T>(db[k][j]);
        } else {
          p.db_part[base + c] = db[k][j];
        }
      }
    }
  }
}

// Vectors per thread (1, 2, 4 or 8) and threads (a warp multiple, at most kFusedThreads) that
// cover a row of n_vec vectors; k == 0 when the row is too long for the fused kernel.
struct FusedShape {
  int k;
  int threads;
};

// Columns a thread may own: kMaxColsPerThread float accumulators; a quarter as many doubles
// (twice the registers each, and fp64 rows are the gradcheck's, not a bandwidth case).
template <typename T>
constexpr int max_cols_per_thread() {
  return sizeof(acc_t<T>) == 4 ? kMaxColsPerThread : kMaxColsPerThread / 4;
}

template <typename T>
FusedShape fused_shape(int64_t n_vec, int vec) {
  for (const int k : {1, 2, 4, kMaxVecsPerThread}) {
    if (k * vec > max_cols_per_thread<T>()) break;
    const int64_t want = (n_vec + k - 1) / k;
    if (want <= kFusedThreads) {
      const int64_t threads = std::max<int64_t>(
          kMinBlockThreads, (want + kWarpSize - 1) / kWarpSize * kWarpSize);
      return {k, static_cast<int>(threads)};
    }
  }
  return {0, 0};
}

template <typename T, int VEC, int K, bool kBias>
int64_t fused_grid(int threads, int64_t rows) {
  const int64_t resident =
      resident_blocks(norm_backward_fused_kernel<T, VEC, K, kBias>, threads, 0);
  return std::max<int64_t>(1, std::min<int64_t>(rows, resident > 0 ? resident
                                                                    : device_sm_count()));
}

// The instantiation for (VEC, K, kBias): with args null, its grid for `rows`; else its launch.
template <typename T, int VEC, int K, bool kBias>
int64_t fused_leaf(const FusedArgs<T>* args, int threads, int64_t rows, int64_t blocks,
                   cudaStream_t stream) {
  if (args == nullptr) return fused_grid<T, VEC, K, kBias>(threads, rows);
  norm_backward_fused_kernel<T, VEC, K, kBias>
      <<<static_cast<unsigned>(blocks), static_cast<unsigned>(threads), 0, stream>>>(*args);
  return blocks;
}

template <typename T, int VEC>
int64_t fused_by_k(int k, bool bias, const FusedArgs<T>* args, int threads, int64_t rows,
                   int64_t blocks, cudaStream_t stream) {
#define KA_FUSED_K(K)                                                                  \
  return bias ? fused_leaf<T, VEC, K, true>(args, threads, rows, blocks, stream)       \
              : fused_leaf<T, VEC, K, false>(args, threads, rows, blocks, stream)
  switch (k) {  // fused_shape never gives k * VEC > kMaxColsPerThread: not instantiated
    case 1: KA_FUSED_K(1);
    case 2: KA_FUSED_K(2);
    case 4:
      if constexpr (4 * VEC <= max_cols_per_thread<T>()) KA_FUSED_K(4);
      return 0;
    default:
      if constexpr (kMaxVecsPerThread * VEC <= max_cols_per_thread<T>()) {
        KA_FUSED_K(kMaxVecsPerThread);
      }
      return 0;
  }
#undef KA_FUSED_K
}

template <typename T>
int64_t fused_dispatch(bool vec16, int k, bool bias, const FusedArgs<T>* args, int threads,
                       int64_t rows, int64_t blocks, cudaStream_t stream) {
  if (vec16) {
    return fused_by_k<T, vec16_elems<T>()>(k, bias, args, threads, rows, blocks, stream);
  }
  return fused_by_k<T, 1>(k, bias, args, threads, rows, blocks, stream);
}

template <typename T>
bool fused_vec16(const T* x, const T* dy, const T* weight, const T* addend, const T* dx,
                 int64_t cols) {
  return aligned16(x) && aligned16(dy) && aligned16(weight) && aligned16(addend) &&
         aligned16(dx) && (cols * static_cast<int64_t>(sizeof(T))) % kVecBytes == 0;
}

}  // namespace

template <typename T>
int64_t norm_backward_fused_blocks(const T* x, const T* dy, const T* weight, const T* addend,
                                   const T* dx, int64_t rows, int64_t cols, bool bias) {
  const bool vec16 = fused_vec16(x, dy, weight, addend, dx, cols);
  const int vec = vec16 ? vec16_elems<T>() : 1;
  const FusedShape s = fused_shape<T>(cols / vec, vec);
  if (s.k == 0 || rows < 1) return 0;
  return fused_dispatch<T>(vec16, s.k, bias, nullptr, s.threads, rows, 0, nullptr);
}

template <typename T>
void launch_norm_backward_fused(const T* x, const T* dy, const T* weight, const acc_t<T>* mean,
                                const acc_t<T>* rstd, const T* addend, T* dx,
                                acc_t<T>* dweight_partial, acc_t<T>* dbias_partial, T* dweight,
                                T* dbias, int64_t rows, int64_t cols, int64_t blocks,
                                cudaStream_t stream) {
  const bool vec16 = fused_vec16(x, dy, weight, addend, dx, cols);
  const int64_t n_vec = vec16 ? cols / vec16_elems<T>() : cols;
  const FusedShape s = fused_shape<T>(n_vec, vec16 ? vec16_elems<T>() : 1);
  const bool bias = dbias != nullptr;
  const FusedArgs<T> args{x,      dy,     weight,         mean,          rstd,
                          addend, dx,     dweight_partial, dbias_partial, dweight,
                          dbias,  rows,   static_cast<int>(n_vec)};
  fused_dispatch<T>(vec16, s.k, bias, &args, s.threads, rows, blocks, stream);
  if (blocks > 1 && (dweight != nullptr || dbias != nullptr)) {
    launch_sum_partials(dweight != nullptr ? dweight_partial : dbias_partial,
                        dweight != nullptr ? dweight : dbias,
                        dweight != nullptr ? dbias_partial : nullptr,
                        dweight != nullptr ? dbias : nullptr, blocks, cols, stream);
  }
}

#define KA_INSTANTIATE_FUSED(T)                                                                \
  template int64_t norm_backward_fused_blocks<T>(const T*, const T*, const T*, const T*,      \
                                                 const T*, int64_t, int64_t, bool);           \
  template void launch_norm_backward_fused<T>(const T*, const T*, const T*, const acc_t<T>*,  \
                                              const acc_t<T>*, const T*, T*, acc_t<T>*,       \
                                              acc_t<T>*, T*, T*, int64_t, int64_t, int64_t,   \
                                              cudaStream_t);

KA_INSTANTIATE_FUSED(float)
KA_INSTANTIATE_FUSED(double)
KA_INSTANTIATE_FUSED(__half)
KA_INSTANTIATE_FUSED(__nv_bfloat16)
#undef KA_INSTANTIATE_FUSED

}  // namespace ka
