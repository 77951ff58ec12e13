// The row-wise skeleton that softmax, rms_norm and layer_norm share.
//
// A row group owns one row: one warp for short rows (cols <= kWarpMaxCols; warp-shuffle
// reductions, 8 rows per block, no block barriers) or the whole block for long rows (warp
// shuffles, then a cross-warp step through shared memory). The first pass reads the row from
// global memory with 16-byte vector loads when the pointers and the row pitch allow it and
// keeps a copy in shared memory when it fits, so later passes re-read shared memory instead
// of DRAM and every element moves through DRAM once in each direction.
//
// An Op supplies `elem_t`, `aligned16()` (all its pointers) and
//   template <int VEC, typename G> __device__ void run(const G&, const RowView<elem_t, VEC>&,
//                                                      acc_t<elem_t>* scratch) const;
// reading the row with g.first_pass (which also fills the cache) and g.later_pass.
#pragma once

#include <algorithm>
#include <cstdint>

#include "device_math.h"

namespace ka {

constexpr int kWarpMaxCols = 1024;  // rows up to this many elements: one warp per row
constexpr int kWarpsPerBlock = 8;   // warp path: 8 rows per 256-thread block
// 512 threads x 4 vectors cover an 8192-float row in one round of loads; the cap (not 1024)
// leaves ptxas room for registers.
constexpr int kMaxBlockThreads = 512;
constexpr int kMinBlockThreads = 128;
// Vector loads each thread issues from DRAM before using the first: 4, or 2 for 16-bit types,
// whose 8-element vectors take twice the registers once converted to float (4 spill).
constexpr int unroll_depth(size_t elem_bytes) { return elem_bytes == 2 ? 2 : 4; }
// NB: a block may take 48 KiB of shared memory without cudaFuncSetAttribute; 44 KiB for the
// row cache leaves room for the static reduction scratch (32 accumulators).
constexpr int64_t kMaxCacheBytes = 44 * 1024;

// One row as vectors: x (global), y (global) and the shared-memory cache (null if off).
template <typename T, int VEC>
struct RowView {
  using V = Vec<T, VEC>;
  const V* x;
  V* y;
  V* cache;
  int n_vec;
  __device__ int cols() const { return n_vec * VEC; }
};

template <bool kWarpPerRow>
struct RowGroup {
  int rank;     // this thread's index within the group
  int size;     // threads in the group
  int slot;     // the group's index within the block (its cache slice)
  int64_t row;  // the row it owns

  template <typename A>
  __device__ A sum(A v, A* scratch) const {
    if constexpr (kWarpPerRow) return warp_sum(v);
    return block_reduce<false>(v, scratch);
  }
  template <typename A>
  __device__ A max(A v, A* scratch) const {
    if constexpr (kWarpPerRow) return warp_max(v);
    return block_reduce<true>(v, scratch);
  }
  // Calls f(i, v) for each vector i of the row this thread owns (rank, rank + size, ...),
  // issuing kDepth loads before the first use so that several are in flight.
  template <int kDepth, typename V, typename F>
  __device__ void for_each_vec(const V* src, int n_vec, F&& f) const {
    for (int base = rank; base < n_vec; base += size * kDepth) {
      V v[kDepth];
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        const int i = base + u * size;
        if (i < n_vec) v[u] = src[i];
      }
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        const int i = base + u * size;
        if (i < n_vec) f(i, v[u]);
      }
    }
  }
  // The first pass: DRAM, unroll_depth loads deep.
  template <typename T, int VEC, typename F>
  __device__ void first_pass(const RowView<T, VEC>& row, F&& f) const {
    for_each_vec<unroll_depth(sizeof(T))>(row.x, row.n_vec, f);
  }
  // Later passes: the shared-memory copy one vector at a time (its latency is short, and
  // fewer registers let more rows share an SM), or DRAM/L2 again when the row did not fit.
  template <typename T, int VEC, typename F>
  __device__ void later_pass(const RowView<T, VEC>& row, F&& f) const {
    if (row.cache != nullptr) {
      for_each_vec<1>(static_cast<const Vec<T, VEC>*>(row.cache), row.n_vec, f);
    } else {
      for_each_vec<unroll_depth(sizeof(T))>(row.x, row.n_vec, f);
    }
  }
};

template <bool kWarpPerRow>
__device__ RowGroup<kWarpPerRow> this_row_group() {
  if constexpr (kWarpPerRow) {
    const int warp = threadIdx.x / kWarpSize;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / kWarpSize) + warp;
    return {static_cast<int>(threadIdx.x % kWarpSize), kWarpSize, warp, row};
  }
  return {static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x), 0,
          static_cast<int64_t>(blockIdx.x)};
}

// Blocks of kMaxBlockThreads that must fit on one SM together, which caps registers per
// thread at 65536 / (n * 512): 32 for 16-bit types (2048 threads resident: their rows carry
// twice the elements per byte, so more rows must be in flight), 40 for fp32, 128 for fp64.
template <typename T>
constexpr int min_blocks_per_sm() {
  return sizeof(T) == 8 ? 1 : 3;
}

template <typename Op, int VEC, bool kWarpPerRow>
__global__ void __launch_bounds__(kMaxBlockThreads, min_blocks_per_sm<typename Op::elem_t>())
    row_kernel(Op op, int64_t rows, int n_vec, bool cache_row) {
  using T = typename Op::elem_t;
  using V = Vec<T, VEC>;
  extern __shared__ __align__(16) unsigned char row_cache[];
  __shared__ acc_t<T> scratch[kWarpSize];
  const RowGroup<kWarpPerRow> g = this_row_group<kWarpPerRow>();
  // Only whole warps leave here (warp path); the block path launches exactly `rows` blocks.
  if (g.row >= rows) return;
  const int64_t offset = g.row * n_vec;
  V* cache = cache_row ? reinterpret_cast<V*>(row_cache) + static_cast<int64_t>(g.slot) * n_vec
                       : nullptr;
  const RowView<T, VEC> view{reinterpret_cast<const V*>(op.x) + offset,
                             reinterpret_cast<V*>(op.y) + offset, cache, n_vec};
  op.template run<VEC>(g, view, scratch);
}

// 16-byte global -> shared copies that hold no registers while in flight (cp.async, sm_80+;
// a plain copy on older GPUs, where the pipeline below simply does not overlap).
__device__ __forceinline__ void copy_async16(void* smem_dst, const void* gmem_src) {
#if __CUDA_ARCH__ >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem_dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem_src)
               : "memory");
#else
  *static_cast<uint4*>(smem_dst) = *static_cast<const uint4*>(gmem_src);
#endif
}

__device__ __forceinline__ void copy_async_commit() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's committed copy groups are still in flight.
template <int kPending>
__device__ __forceinline__ void copy_async_wait() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// Long rows whose two copies fit in shared memory (16-byte vectors only). A persistent block
// walks rows blockIdx.x, + gridDim.x, ...; while it reduces and writes one row from shared
// memory, cp.async brings the next row into the other buffer, so DRAM stays busy through the
// barriers and the arithmetic instead of idling once per row.
template <typename Op, int VEC>
__global__ void __launch_bounds__(kMaxBlockThreads, min_blocks_per_sm<typename Op::elem_t>())
    row_kernel_pipelined(Op op, int64_t rows, int n_vec) {
  using T = typename Op::elem_t;
  using V = Vec<T, VEC>;
  static_assert(sizeof(V) == kVecBytes, "cp.async moves 16-byte vectors");
  extern __shared__ __align__(16) unsigned char row_cache[];
  __shared__ acc_t<T> scratch[kWarpSize];
  V* const buffers = reinterpret_cast<V*>(row_cache);  // two rows: [0, n_vec), [n_vec, 2 n_vec)
  const V* x = reinterpret_cast<const V*>(op.x);
  V* y = reinterpret_cast<V*>(op.y);
  const auto prefetch = [&](int64_t row, V* dst) {
    const V* src = x + row * n_vec;
    for (int i = threadIdx.x; i < n_vec; i += blockDim.x) copy_async16(dst + i, src + i);
    copy_async_commit();
  };
  int64_t row = blockIdx.x;  // the grid never exceeds rows
  prefetch(row, buffers);
  for (int k = 0; row < rows; ++k, row += gridDim.x) {
    const int64_t next = row + gridDim.x;
    if (next < rows) {
      prefetch(next, buffers + ((k + 1) & 1) * n_vec);
      copy_async_wait<1>();  // this row's group has landed; the next one may still fly
    } else {
      copy_async_wait<0>();
    }
    __syncthreads();  // ... for every thread's share of the row
    const RowGroup<false> g{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x), 0, row};
    // x is the shared copy and there is no separate cache: every pass reads shared memory.
    const RowView<T, VEC> view{buffers + (k & 1) * n_vec, y + row * n_vec, nullptr, n_vec};
    op.template run<VEC>(g, view, scratch);
    __syncthreads();  // all reads of this buffer are done before iteration k + 1 refills it
  }
}

struct RowPlan {
  bool warp_per_row;
  bool pipelined;
  bool cache_row;
  unsigned grid;
  unsigned threads;
  size_t smem_bytes;
};

inline RowPlan plan_rows(int64_t rows, int64_t cols, int vec, size_t elem_bytes) {
  RowPlan p{};
  p.warp_per_row = cols <= kWarpMaxCols;
  const int64_t row_bytes = cols * static_cast<int64_t>(elem_bytes);
  const int64_t n_vec = cols / vec;
  if (p.warp_per_row) {
    p.threads = kWarpsPerBlock * kWarpSize;
    p.grid = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
    p.cache_row = kWarpsPerBlock * row_bytes <= kMaxCacheBytes;
    p.smem_bytes = p.cache_row ? static_cast<size_t>(kWarpsPerBlock * row_bytes) : 0;
    return p;
  }
  p.pipelined = vec * static_cast<int64_t>(elem_bytes) == kVecBytes &&
                2 * row_bytes <= kMaxCacheBytes;
  // Pipelined: 4 vectors per thread (its loads are asynchronous, so fewer threads per row
  // leave room for more rows per SM). Otherwise unroll_depth vectors: one round of loads in
  // flight covers the row.
  const int64_t per_thread = p.pipelined ? 4 : unroll_depth(elem_bytes);
  const int64_t want = (n_vec + per_thread - 1) / per_thread;
  const int64_t rounded = (want + kWarpSize - 1) / kWarpSize * kWarpSize;
  p.threads = static_cast<unsigned>(
      std::min<int64_t>(kMaxBlockThreads, std::max<int64_t>(kMinBlockThreads, rounded)));
  p.grid = static_cast<unsigned>(rows);
  p.cache_row = !p.pipelined && row_bytes <= kMaxCacheBytes;
  p.smem_bytes = p.pipelined ? static_cast<size_t>(2 * row_bytes)
                             : p.cache_row ? static_cast<size_t>(row_bytes) : 0;
  return p;
}

template <typename Op, int VEC>
void launch_rows_vec(const Op& op, int64_t rows, int64_t cols, cudaStream_t stream) {
  const RowPlan p = plan_rows(rows, cols, VEC, sizeof(typename Op::elem_t));
  const int n_vec = static_cast<int>(cols / VEC);
  if (p.warp_per_row) {
    row_kernel<Op, VEC, true><<<p.grid, p.threads, p.smem_bytes, stream>>>(op, rows, n_vec,
                                                                           p.cache_row);
  } else if (p.pipelined) {
    // Only 16-byte vectors reach here; the branch keeps the VEC = 1 instantiation out.
    if constexpr (VEC * sizeof(typename Op::elem_t) == kVecBytes) {
      const auto kernel = row_kernel_pipelined<Op, VEC>;
      const int64_t resident = resident_blocks(kernel, p.threads, p.smem_bytes);
      const int64_t grid = resident > 0 ? std::min<int64_t>(rows, resident) : rows;
      kernel<<<static_cast<unsigned>(grid), p.threads, p.smem_bytes, stream>>>(op, rows, n_vec);
    }
  } else {
    row_kernel<Op, VEC, false><<<p.grid, p.threads, p.smem_bytes, stream>>>(op, rows, n_vec,
                                                                            p.cache_row);
  }
}

// 16-byte vectors when every pointer is 16-byte aligned and the row pitch keeps each row
// aligned (cols * sizeof(T) % 16 == 0); element-wise accesses otherwise.
template <typename Op>
void launch_rows(const Op& op, int64_t rows, int64_t cols, cudaStream_t stream) {
  using T = typename Op::elem_t;
  constexpr int kVec = vec16_elems<T>();
  if (op.aligned16() && (cols * static_cast<int64_t>(sizeof(T))) % kVecBytes == 0) {
    launch_rows_vec<Op, kVec>(op, rows, cols, stream);
  } else {
    launch_rows_vec<Op, 1>(op, rows, cols, stream);
  }
}

}  // namespace ka
