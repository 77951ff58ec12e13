// Fused bias + activation: y[r, c] = act(x[r, c] + bias[c]), computed in float (double for
// fp64) and rounded once, where eager PyTorch rounds x + bias to T first. (Without a bias the
// activation is pointwise.cu's launch_act.)
//
// Bytes per call: rows * cols * sizeof(T) read + the same written + cols * sizeof(T) of bias,
// which each thread loads once into registers for its column vector and reuses down the rows.
// The activation is a template parameter: each variant carries only its own code and
// registers.
#include <algorithm>

#include "activations.h"
#include "device_math.h"
#include "launchers.h"

namespace ka {
namespace {

// NB: the defaults below were picked on an H200 at 16384x8192 (benchmarks/tune_rowwise.py
// builds other settings with -D to compare them): bf16 gelu 0.92 of copy with 1 row per
// thread and 2048 threads per SM, 0.93 with 1536, 0.88 with 4 rows x 1024 threads, 0.53
// with 2 rows per thread at a 32-register cap; earlier, 0.82 with a block per row tile
// instead of one resident wave and 0.71-0.75 when each thread prefetched its next row.
// The default was 0.86-0.87 before exp2_ftz and the branch-free x < -6 select cut the bf16
// gelu loop from 272 to 208 SASS instructions per 8-element vector (cuobjdump, sm_90): at
// 4 bytes per element, a 16-bit stream at DRAM speed is close to issue-bound.
#ifndef KA_BIAS_ACT_MIN_BLOCKS
#define KA_BIAS_ACT_MIN_BLOCKS 8
#endif
#ifndef KA_BIAS_ACT_ROW_UNROLL
#define KA_BIAS_ACT_ROW_UNROLL 1
#endif
constexpr int kThreads = 256;
// Blocks per SM the register cap is set for: 8 caps registers at 32 (2048 threads resident).
constexpr int kMinBlocksPerSm = KA_BIAS_ACT_MIN_BLOCKS;
constexpr int kRowUnroll = KA_BIAS_ACT_ROW_UNROLL;  // rows each thread loads before using the first
constexpr int kMaxGridY = 65535;    // CUDA's limit on gridDim.y

// Thread (tx, ty) of block (bx, by) owns column vector bx * blockDim.x + tx and walks the rows
// by + ty, stepping gridDim.y * blockDim.y.
template <typename T, int VEC, Activation kAct>
__global__ void __launch_bounds__(kThreads, kMinBlocksPerSm)
    bias_act_kernel(const T* __restrict__ x, const T* __restrict__ bias, T* __restrict__ y,
                    int64_t rows, int n_vec_cols) {
  using A = acc_t<T>;
  using V = Vec<T, VEC>;
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= n_vec_cols) return;  // no barriers in this kernel
  A bias_acc[VEC];
  const V b = reinterpret_cast<const V*>(bias)[col];
#pragma unroll
  for (int j = 0; j < VEC; ++j) bias_acc[j] = to_acc(b.v[j]);

  const V* xv = reinterpret_cast<const V*>(x) + col;
  V* yv = reinterpret_cast<V*>(y) + col;
  const int64_t step = static_cast<int64_t>(gridDim.y) * blockDim.y;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; r0 < rows;
       r0 += step * kRowUnroll) {
    V v[kRowUnroll];
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      const int64_t r = r0 + u * step;
      if (r < rows) v[u] = xv[r * n_vec_cols];
    }
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) {
      const int64_t r = r0 + u * step;
      if (r >= rows) continue;
      V out;
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        out.v[j] = from_acc<T>(
            activate<kAct, is_16bit<T>()>(to_acc(v[u].v[j]) + bias_acc[j]));
      }
      yv[r * n_vec_cols] = out;
    }
  }
}

template <typename T, int VEC, Activation kAct>
void launch_bias_act_act(const T* x, const T* bias, T* y, int64_t rows, int64_t cols,
                         cudaStream_t stream) {
  const auto kernel = bias_act_kernel<T, VEC, kAct>;
  const int n_vec_cols = static_cast<int>(cols / VEC);
  // Narrow rows: fewer threads across, more rows per block, so no lane idles.
  const int tx = std::min(kThreads, (n_vec_cols + kWarpSize - 1) / kWarpSize * kWarpSize);
  const int ty = kThreads / tx;
  const int grid_x = (n_vec_cols + tx - 1) / tx;
  const int64_t row_blocks = (rows + ty - 1) / ty;
  // A grid the device holds in one wave; each thread then loops over its share of the rows.
  const int64_t resident = resident_blocks(kernel, kThreads, 0);
  const int64_t want_y = resident > 0 ? (resident + grid_x - 1) / grid_x : row_blocks;
  const int grid_y = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>({row_blocks, want_y, static_cast<int64_t>(kMaxGridY)})));
  kernel<<<dim3(grid_x, grid_y), dim3(tx, ty), 0, stream>>>(x, bias, y, rows, n_vec_cols);
}

template <typename T, int VEC>
void launch_bias_act_vec(const T* x, const T* bias, T* y, int64_t rows, int64_t cols,
                         Activation act, cudaStream_t stream) {
  switch (act) {
    case Activation::kRelu:
      return launch_bias_act_act<T, VEC, Activation::kRelu>(x, bias, y, rows, cols, stream);
    case Activation::kGeluErf:
      return launch_bias_act_act<T, VEC, Activation::kGeluErf>(x, bias, y, rows, cols, stream);
    case Activation::kGeluTanh:
      return launch_bias_act_act<T, VEC, Activation::kGeluTanh>(x, bias, y, rows, cols, stream);
    case Activation::kSilu:
      return launch_bias_act_act<T, VEC, Activation::kSilu>(x, bias, y, rows, cols, stream);
  }
}

}  // namespace

template <typename T>
void launch_bias_act(const T* x, const T* bias, T* y, int64_t rows, int64_t cols,
                     Activation act, cudaStream_t stream) {
  constexpr int kVec = vec16_elems<T>();
  const bool vec_ok = aligned16(x) && aligned16(bias) && aligned16(y) &&
                      (cols * static_cast<int64_t>(sizeof(T))) % kVecBytes == 0;
  if (vec_ok) {
    launch_bias_act_vec<T, kVec>(x, bias, y, rows, cols, act, stream);
  } else {
    launch_bias_act_vec<T, 1>(x, bias, y, rows, cols, act, stream);
  }
}

#define KA_INSTANTIATE_BIAS_ACT(T)                                                       \
  template void launch_bias_act<T>(const T*, const T*, T*, int64_t, int64_t, Activation, \
                                   cudaStream_t);

KA_INSTANTIATE_BIAS_ACT(float)
KA_INSTANTIATE_BIAS_ACT(double)
KA_INSTANTIATE_BIAS_ACT(__half)
KA_INSTANTIATE_BIAS_ACT(__nv_bfloat16)
#undef KA_INSTANTIATE_BIAS_ACT

}  // namespace ka
