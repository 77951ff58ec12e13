// Device helpers shared by the .cu files: element conversions, 16-byte vectors, math
// overloads for the accumulation type, warp and block reductions. Included only by nvcc.
//
// Torch builds extensions with __CUDA_NO_HALF_OPERATORS__ / __CUDA_NO_HALF_CONVERSIONS__ /
// __CUDA_NO_BFLOAT16_CONVERSIONS__, so every fp16/bf16 conversion here is explicit.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "launchers.h"

namespace ka {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kVecBytes = 16;  // one 128-bit load or store per thread

// N elements loaded or stored as one access; N * sizeof(T) == 16 gives ld/st.v4.
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};

template <typename T>
constexpr int vec16_elems() {
  return kVecBytes / static_cast<int>(sizeof(T));
}

__host__ __device__ inline bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % kVecBytes == 0;
}

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ double to_acc(double v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }

// Round-to-nearest-even to T (one rounding from the accumulation type).
template <typename T>
__device__ __forceinline__ T from_acc(acc_t<T> v) {
  return v;
}
template <>
__device__ __forceinline__ __half from_acc<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_acc<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Accurate library functions: the build does not pass --use_fast_math.
__device__ __forceinline__ float exp_acc(float v) { return expf(v); }
__device__ __forceinline__ double exp_acc(double v) { return exp(v); }
__device__ __forceinline__ float log_acc(float v) { return logf(v); }
__device__ __forceinline__ double log_acc(double v) { return log(v); }
__device__ __forceinline__ float erf_acc(float v) { return erff(v); }
__device__ __forceinline__ double erf_acc(double v) { return erf(v); }
__device__ __forceinline__ float tanh_acc(float v) { return tanhf(v); }
__device__ __forceinline__ double tanh_acc(double v) { return tanh(v); }
__device__ __forceinline__ float sqrt_acc(float v) { return sqrtf(v); }
__device__ __forceinline__ double sqrt_acc(double v) { return sqrt(v); }
__device__ __forceinline__ float exp2_acc(float v) { return exp2f(v); }  // ex2.approx, 2 ulp
// 2^v in one MUFU.EX2, results under 2^-126 flushed to 0. exp2f compiles to ex2.approx.f32,
// which sm_90 wraps in a compare and two multiplies per call to keep denormal results: a
// quarter of the instructions of a 16-bit bias+gelu stream. The fast 16-bit paths add the
// result to 1 or take it from an argument >= -30, where a denormal never reaches the output.
__device__ __forceinline__ float exp2_ftz(float v) {
  float r;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(v));
  return r;
}
// a / b within 2 ulp for |b| < 2^126 (0 above, a * 0 for b = inf): for 16-bit outputs only.
__device__ __forceinline__ float fast_div(float a, float b) { return __fdividef(a, b); }
constexpr float kLog2e = 1.4426950408889634f;

// Phi(x), the normal CDF, for 16-bit outputs: log2 Phi(-|x|) as one degree-7 polynomial
// (reference_kernels/normal_tail.py, which fits and checks these literals), then one ex2.
// NB: relative error <= ~6e-6, far under half an ulp of fp16 (2.4e-4) or bf16 (2e-3), at 7 FMAs
// + 1 ex2 where erff takes two polynomial branches and an exp.
__device__ __forceinline__ float normal_cdf_fast(float x) {
  const float a = fminf(fabsf(x), 6.0f);  // CLAMP
  float r = fmaf(a, -1.834886221e-06f, 6.159975692e-05f);
  r = fmaf(r, a, -9.305359658e-04f);
  r = fmaf(r, a, 8.507932121e-03f);
  r = fmaf(r, a, -5.396014574e-02f);
  r = fmaf(r, a, -4.584643275e-01f);
  r = fmaf(r, a, -1.151251065e+00f);
  r = fmaf(r, a, -9.999952935e-01f);
  const float tail = exp2_ftz(r);  // Phi(-|x|) >= 2^-30: never denormal
  return x < 0.0f ? tail : 1.0f - tail;
}

template <typename T>
constexpr bool is_16bit() {
  return sizeof(T) == 2;
}

// exp(a - row_max) in the accumulation type (softmax, cross-entropy).
// NB: for 16-bit inputs exp2(a * log2e - row_max * log2e): one FFMA and one ex2 (2 ulp); the
// argument's rounding keeps the relative error near 1e-6 for the terms that matter, far under
// half an ulp of fp16/bf16 (softmax.cu has the numbers).
template <typename T>
struct ShiftedExp {
  acc_t<T> row_max;
  __device__ acc_t<T> operator()(acc_t<T> a) const {
    if constexpr (is_16bit<T>()) {
      return exp2_acc(fmaf(a, kLog2e, -row_max * kLog2e));
    } else {
      return exp_acc(a - row_max);
    }
  }
};

// fmax drops a NaN operand; softmax still returns NaN for a row holding one, because
// exp(NaN - max) makes the row sum NaN.
__device__ __forceinline__ float max_acc(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double max_acc(double a, double b) { return fmax(a, b); }

template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(kFullMask, v, offset);
  }
  return v;
}

template <typename A>
__device__ __forceinline__ A warp_max(A v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v = max_acc(v, __shfl_xor_sync(kFullMask, v, offset));
  }
  return v;
}

// Sum or max over the whole block; every thread must call it (it holds barriers) and gets
// the result. `scratch` holds one value per warp; blockDim.x is a multiple of 32.
template <bool kMax, typename A>
__device__ A block_reduce(A v, A* scratch) {
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int n_warps = blockDim.x / kWarpSize;
  const A identity = kMax ? static_cast<A>(-INFINITY) : static_cast<A>(0);
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // the previous reduction's readers of scratch[0] are done
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    A w = lane < n_warps ? scratch[lane] : identity;
    w = kMax ? warp_max(w) : warp_sum(w);
    if (lane == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}

// Blocks of `kernel` the device holds at once (all SMs); 0 if a query fails, its error then
// pending for the caller's launch check. Cached per host thread, device, kernel and launch
// shape: the occupancy query costs microseconds of host time, paid on every launch otherwise.
template <typename Kernel>
int64_t resident_blocks(Kernel kernel, int threads, size_t smem_bytes) {
  struct Entry {
    const void* kernel;
    int device;
    int threads;
    size_t smem_bytes;
    int64_t blocks;
  };
  thread_local std::vector<Entry> cache;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  const void* key = reinterpret_cast<const void*>(kernel);
  for (const Entry& e : cache) {
    if (e.kernel == key && e.device == device && e.threads == threads &&
        e.smem_bytes == smem_bytes) {
      return e.blocks;
    }
  }
  int sm_count = 0;
  int per_sm = 0;
  if (cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem_bytes) !=
          cudaSuccess) {
    return 0;
  }
  const int64_t blocks = static_cast<int64_t>(sm_count) * per_sm;
  cache.push_back({key, device, threads, smem_bytes, blocks});
  return blocks;
}

// The current device's SM count, cached per host thread and device (1 if the query fails).
inline int device_sm_count() {
  thread_local std::vector<std::pair<int, int>> cache;  // (device, SMs)
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 1;
  for (const auto& [d, sms] : cache) {
    if (d == device) return sms;
  }
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) return 1;
  cache.emplace_back(device, sms);
  return sms;
}

}  // namespace ka
