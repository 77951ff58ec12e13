// The row-wise skeleton that softmax, rms_norm and layer_norm share.
//
// A row group owns one row: one warp for short rows (cols <= kWarpMaxCols; warp-shuffle
// reductions, 8 rows per block, no block barriers; rows of up to 8 vectors per lane stay in
// registers, row_kernel_warp_registers) or the whole block for long rows (warp
// shuffles, then a cross-warp step through shared memory). Long rows of 2- and 4-byte types
// that a block holds in 2 or 4 16-byte vectors per thread stay in registers
// (row_kernel_registers). Otherwise the first pass reads the row from global memory with
// 16-byte vector loads when the pointers and the row pitch allow it and keeps a copy in shared
// memory when it fits, so later passes re-read shared memory instead of DRAM; either way every
// element moves through DRAM once in each direction.
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

// Long rows of 2- and 4-byte types stay in registers (row_kernel_registers) when a block of at
// most kMaxBlockThreads holds the row in 2 or 4 vectors per thread. -DKA_REGISTER_ROWS=0 turns
// that off (shared-memory paths only): benchmarks/tune_rowwise.py builds it to compare.
#ifndef KA_REGISTER_ROWS
#define KA_REGISTER_ROWS 1
#endif

// Vector i of a per-column parameter (a norm's weight) as VEC accumulators; 1 where it is null.
template <typename T, int VEC>
__device__ __forceinline__ void load_param_vec(const T* param, int i, acc_t<T> (&out)[VEC]) {
  if (param == nullptr) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) out[j] = static_cast<acc_t<T>>(1);
    return;
  }
  const Vec<T, VEC> v = reinterpret_cast<const Vec<T, VEC>*>(param)[i];
#pragma unroll
  for (int j = 0; j < VEC; ++j) out[j] = to_acc(v.v[j]);
}

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
  // for_each_vec over two sources read side by side, f(i, a[i], b[i]), so that the loads of
  // both are in flight together; b may be null (its value is then left unset and unused).
  template <int kDepth, typename V, typename F>
  __device__ void for_each_vec2(const V* a, const V* b, int n_vec, F&& f) const {
    for (int base = rank; base < n_vec; base += size * kDepth) {
      V va[kDepth];
      V vb[kDepth];
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        const int i = base + u * size;
        if (i < n_vec) {
          va[u] = a[i];
          if (b != nullptr) vb[u] = b[i];
        }
      }
#pragma unroll
      for (int u = 0; u < kDepth; ++u) {
        const int i = base + u * size;
        if (i < n_vec) f(i, va[u], vb[u]);
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

// A row held in registers, kVecs vectors per thread (rank, rank + size, ...): the first pass
// loads them all before using the first (kVecs * 16 bytes in flight per thread) and the later
// passes re-read registers, so there is no shared-memory copy to wait on or bank-conflict
// through. kWarp false: a block owns a long row of up to kMaxBlockThreads * kVecs vectors
// (RowPlan::register_vecs) and reduces across warps. kWarp true: a warp owns a short row of up
// to 32 * kWarpVecsMax vectors (warp_register_vecs) and reduces with shuffles alone, no block
// barrier; the shared-memory copy of the warp path cost tiny rows about 1 us of kernel time
// against eager's register-resident warp softmax (ncu, H200).
template <typename V, int kVecs, bool kWarp = false>
struct RegisterRowGroup {
  int rank;
  int size;
  int slot;
  int64_t row;
  mutable V regs[kVecs];  // indexed only with unrolled constants: stays in registers

  template <typename A>
  __device__ A sum(A v, A* scratch) const {
    if constexpr (kWarp) return warp_sum(v);
    return block_reduce<false>(v, scratch);
  }
  template <typename A>
  __device__ A max(A v, A* scratch) const {
    if constexpr (kWarp) return warp_max(v);
    return block_reduce<true>(v, scratch);
  }
  template <typename T, int VEC, typename F>
  __device__ void first_pass(const RowView<T, VEC>& row, F&& f) const {
#pragma unroll
    for (int u = 0; u < kVecs; ++u) {
      const int i = rank + u * stride();
      if (i < row.n_vec) regs[u] = row.x[i];
    }
    later_pass(row, f);
  }
  template <typename T, int VEC, typename F>
  __device__ void later_pass(const RowView<T, VEC>& row, F&& f) const {
#pragma unroll
    for (int u = 0; u < kVecs; ++u) {
      const int i = rank + u * stride();
      if (i < row.n_vec) f(i, regs[u]);
    }
  }
  __device__ int stride() const { return kWarp ? kWarpSize : size; }
};

constexpr int kWarpVecsMax = 8;  // vectors per lane: 1024 fp32 or 256 scalar columns

// Vectors per lane (2, 4 or 8) for a warp-held row of n_vec vectors; 0 if it does not fit.
inline int warp_register_vecs(int64_t n_vec) {
  for (const int k : {2, 4, kWarpVecsMax}) {
    if (n_vec <= static_cast<int64_t>(k) * kWarpSize) return k;
  }
  return 0;
}

template <typename Op, int VEC, int kVecs>
__global__ void __launch_bounds__(kWarpsPerBlock * kWarpSize)
    row_kernel_warp_registers(Op op, int64_t rows, int n_vec) {
  using T = typename Op::elem_t;
  using V = Vec<T, VEC>;
  __shared__ acc_t<T> scratch[kWarpSize];  // run()'s signature; warp reductions never touch it
  const int warp = threadIdx.x / kWarpSize;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
  if (row >= rows) return;  // whole warps only
  const RegisterRowGroup<V, kVecs, true> g{static_cast<int>(threadIdx.x % kWarpSize), kWarpSize,
                                           warp, row, {}};
  const int64_t offset = row * n_vec;
  const RowView<T, VEC> view{reinterpret_cast<const V*>(op.x) + offset,
                             reinterpret_cast<V*>(op.y) + offset, nullptr, n_vec};
  op.template run<VEC>(g, view, scratch);
}

// The row's max (the first pass, which also fills the cache) and sum of exp(x - max) (a later
// pass): softmax's two reductions, and cross-entropy's for its logsumexp.
template <typename T, int VEC, typename G>
__device__ void row_max_and_sum_exp(const G& g, const RowView<T, VEC>& row, acc_t<T>* scratch,
                                    acc_t<T>& row_max, acc_t<T>& row_sum) {
  using A = acc_t<T>;
  using V = Vec<T, VEC>;
  row_max = static_cast<A>(-INFINITY);
  g.first_pass(row, [&](int i, const V& v) {
    if (row.cache != nullptr) row.cache[i] = v;
#pragma unroll
    for (int j = 0; j < VEC; ++j) row_max = max_acc(row_max, to_acc(v.v[j]));
  });
  row_max = g.max(row_max, scratch);
  const ShiftedExp<T> shifted_exp{row_max};
  row_sum = 0;
  g.later_pass(row, [&](int, const V& v) {
#pragma unroll
    for (int j = 0; j < VEC; ++j) row_sum += shifted_exp(to_acc(v.v[j]));
  });
  row_sum = g.sum(row_sum, scratch);
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

// 512-thread blocks per SM the register kernel is compiled for, i.e. its register cap: 64 per
// thread when 16-bit rows keep 4 vectors (32 elements, which spill under a 40-register cap and
// halved rms_norm's bandwidth on an H200), 40 otherwise.
template <typename T, int kVecs>
constexpr int register_min_blocks_per_sm() {
  return sizeof(T) == 2 && kVecs == 4 ? 2 : 3;
}

template <typename Op, int VEC, int kVecs>
__global__ void __launch_bounds__(kMaxBlockThreads,
                                  register_min_blocks_per_sm<typename Op::elem_t, kVecs>())
    row_kernel_registers(Op op, int n_vec) {
  using T = typename Op::elem_t;
  using V = Vec<T, VEC>;
  __shared__ acc_t<T> scratch[kWarpSize];
  const RegisterRowGroup<V, kVecs> g{static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x),
                                     0, static_cast<int64_t>(blockIdx.x), {}};
  const int64_t offset = g.row * n_vec;  // the grid is exactly `rows` blocks
  const RowView<T, VEC> view{reinterpret_cast<const V*>(op.x) + offset,
                             reinterpret_cast<V*>(op.y) + offset, nullptr, n_vec};
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

// Threads for a register block holding n_vec vectors, kVecs per thread (0: the row does not fit).
inline int64_t register_threads(int64_t n_vec, int k_vecs) {
  const int64_t want = (n_vec + k_vecs - 1) / k_vecs;
  const int64_t threads = std::max<int64_t>(kMinBlockThreads,
                                            (want + kWarpSize - 1) / kWarpSize * kWarpSize);
  return threads <= kMaxBlockThreads ? threads : 0;
}

// Threads of a block that owns a row of n_vec vectors, per_thread of them each: enough for one
// round of loads to cover the row, a warp multiple within [kMinBlockThreads, kMaxBlockThreads].
inline unsigned block_row_threads(int64_t n_vec, int64_t per_thread) {
  const int64_t want = (n_vec + per_thread - 1) / per_thread;
  const int64_t rounded = (want + kWarpSize - 1) / kWarpSize * kWarpSize;
  return static_cast<unsigned>(
      std::min<int64_t>(kMaxBlockThreads, std::max<int64_t>(kMinBlockThreads, rounded)));
}

// Whether `op`'s rows of `cols` take 16-byte vectors: every pointer 16-byte aligned and the
// row pitch keeping each row aligned (cols * sizeof(T) % 16 == 0).
template <typename Op>
bool rows_take_vec16(const Op& op, int64_t cols) {
  return op.aligned16() &&
         (cols * static_cast<int64_t>(sizeof(typename Op::elem_t))) % kVecBytes == 0;
}

struct RowPlan {
  bool warp_per_row;
  int register_vecs;  // 2 or 4: rows in registers (row_kernel_registers); 0: not
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
  p.threads = block_row_threads(n_vec, p.pipelined ? 4 : unroll_depth(elem_bytes));
  p.grid = static_cast<unsigned>(rows);
  p.cache_row = !p.pipelined && row_bytes <= kMaxCacheBytes;
  p.smem_bytes = p.pipelined ? static_cast<size_t>(2 * row_bytes)
                             : p.cache_row ? static_cast<size_t>(row_bytes) : 0;
  return p;
}

// Of the register kernels that hold a row (2 or 4 vectors per thread), the one with the most
// rows resident per SM, i.e. the most bytes in flight (ties: 4 vectors, fewer threads to
// reduce over). Measured on an H200, bf16: 8192 columns -> 4 vectors, 256 threads, 4 blocks
// per SM; 2048 columns -> 2 vectors, 128 threads, 12 blocks. 0 when none applies.
template <typename Op, int VEC>
int pick_register_vecs(int64_t n_vec) {
  using T = typename Op::elem_t;
  if constexpr (KA_REGISTER_ROWS == 0 || sizeof(T) == 8 || VEC * sizeof(T) != kVecBytes) {
    return 0;
  } else {
    int best = 0;
    int64_t best_resident = 0;
    for (const int k_vecs : {4, 2}) {
      const int64_t threads = register_threads(n_vec, k_vecs);
      if (threads == 0) continue;
      const auto kernel = k_vecs == 4 ? row_kernel_registers<Op, VEC, 4>
                                      : row_kernel_registers<Op, VEC, 2>;
      const int64_t resident = resident_blocks(kernel, static_cast<int>(threads), 0);
      if (resident > best_resident) {
        best = k_vecs;
        best_resident = resident;
      }
    }
    return best;
  }
}

template <typename Op, int VEC>
void launch_rows_vec(const Op& op, int64_t rows, int64_t cols, cudaStream_t stream) {
  RowPlan p = plan_rows(rows, cols, VEC, sizeof(typename Op::elem_t));
  const int n_vec = static_cast<int>(cols / VEC);
  if (!p.warp_per_row) p.register_vecs = pick_register_vecs<Op, VEC>(n_vec);
  const int warp_vecs = p.warp_per_row ? warp_register_vecs(n_vec) : 0;
  if (warp_vecs == 2) {
    row_kernel_warp_registers<Op, VEC, 2><<<p.grid, p.threads, 0, stream>>>(op, rows, n_vec);
  } else if (warp_vecs == 4) {
    row_kernel_warp_registers<Op, VEC, 4><<<p.grid, p.threads, 0, stream>>>(op, rows, n_vec);
  } else if (warp_vecs == kWarpVecsMax) {
    row_kernel_warp_registers<Op, VEC, kWarpVecsMax><<<p.grid, p.threads, 0, stream>>>(
        op, rows, n_vec);
  } else if (p.warp_per_row) {
    row_kernel<Op, VEC, true><<<p.grid, p.threads, p.smem_bytes, stream>>>(op, rows, n_vec,
                                                                           p.cache_row);
  } else if (p.register_vecs != 0) {
    // pick_register_vecs returns 0 for the types and widths this branch must not instantiate.
    if constexpr (sizeof(typename Op::elem_t) != 8 && VEC * sizeof(typename Op::elem_t) == kVecBytes) {
      const auto threads = static_cast<unsigned>(register_threads(n_vec, p.register_vecs));
      const auto grid = static_cast<unsigned>(rows);
      if (p.register_vecs == 4) {
        row_kernel_registers<Op, VEC, 4><<<grid, threads, 0, stream>>>(op, n_vec);
      } else {
        row_kernel_registers<Op, VEC, 2><<<grid, threads, 0, stream>>>(op, n_vec);
      }
    }
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

// 16-byte vectors where the rows take them (rows_take_vec16), element-wise accesses otherwise.
template <typename Op>
void launch_rows(const Op& op, int64_t rows, int64_t cols, cudaStream_t stream) {
  constexpr int kVec = vec16_elems<typename Op::elem_t>();
  if (rows_take_vec16(op, cols)) {
    launch_rows_vec<Op, kVec>(op, rows, cols, stream);
  } else {
    launch_rows_vec<Op, 1>(op, rows, cols, stream);
  }
}

}  // namespace ka
