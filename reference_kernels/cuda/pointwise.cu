// Element-wise kernels over n contiguous elements: the activations' forward (no bias; with a
// bias it is bias_act.cu) and backward, SwiGLU (y = silu(a) * b) forward and backward, and the
// residual add of add_rms_norm/add_layer_norm.
//
// Bytes per call: act forward reads x and writes y (2 n sizeof(T)), its backward reads x and dy
// and writes dx (3 n); swiglu reads a and b and writes y (3 n), its backward reads a, b, dy and
// writes da, db (5 n); add 3 n. Every value is computed in float (double for fp64) and
// rounded once. The n / VEC 16-byte vectors go in tiles of kThreads * kUnroll, each thread
// loading its kUnroll vectors (kThreads apart, so each load is coalesced) before computing
// any; the last n % VEC elements are block 0's.
#include <algorithm>
#include <type_traits>

#include "activations.h"
#include "device_math.h"
#include "launchers.h"

namespace ka {
namespace {

constexpr int64_t kMaxGridX = 2147483647;  // CUDA's limit on gridDim.x

// How a functor's tiles are laid out and launched.
// NB: picked on an H200 (16.7M elements, L2 flushed): a grid of every tile, 128 threads x 2
// vectors each, took fp32 silu and gelu backward 4 % faster than one persistent wave of
// 256 x 1 and bf16 gelu backward 3 % faster, fp32 silu forward 3 % faster than 256 x 1 per
// tile (gelu forward even); bf16 silu backward was 3 % slower that way, so cheap 16-bit
// backwards keep one vector per thread at 256 threads. swiglu and add keep the one-wave
// persistent grid they were tuned with.
template <int kThreadsPerBlock, int kVectorsPerThread, bool kOneWave>
struct Tiling {
  static constexpr int kThreads = kThreadsPerBlock;
  static constexpr int kUnroll = kVectorsPerThread;
  static constexpr bool kPersistent = kOneWave;  // grid of resident blocks striding the tiles
};
using TwoPerThread = Tiling<128, 2, false>;
using OnePerThread = Tiling<256, 1, false>;
using OneWave = Tiling<256, 1, true>;

template <typename T, int VEC, Activation kAct>
struct ActForward : TwoPerThread {
  static constexpr int kIn = 1;   // x
  static constexpr int kOut = 1;  // y
  __device__ void operator()(const acc_t<T> (&in)[kIn], acc_t<T> (&out)[kOut]) const {
    out[0] = activate<kAct, is_16bit<T>()>(in[0]);
  }
};

template <typename T, Activation kAct>
using ActBackwardTiling =
    std::conditional_t<is_16bit<T>() && (kAct == Activation::kSilu || kAct == Activation::kRelu),
                       OnePerThread, TwoPerThread>;

template <typename T, int VEC, Activation kAct>
struct ActBackward : ActBackwardTiling<T, kAct> {
  static constexpr int kIn = 2;   // x, dy
  static constexpr int kOut = 1;  // dx
  __device__ void operator()(const acc_t<T> (&in)[kIn], acc_t<T> (&out)[kOut]) const {
    out[0] = in[1] * activate_grad<kAct>(in[0]);
  }
};

template <typename A>
__device__ __forceinline__ A sigmoid_acc(A v) {
  return static_cast<A>(1) / (static_cast<A>(1) + exp_acc(-v));
}

template <typename T, int VEC>
struct SwigluForward : OneWave {
  static constexpr int kIn = 2;   // a, b
  static constexpr int kOut = 1;  // y
  __device__ void operator()(const acc_t<T> (&in)[kIn], acc_t<T> (&out)[kOut]) const {
    out[0] = in[0] * sigmoid_acc(in[0]) * in[1];
  }
};

template <typename T, int VEC>
struct SwigluBackward : OneWave {
  static constexpr int kIn = 3;   // a, b, dy
  static constexpr int kOut = 2;  // da, db
  __device__ void operator()(const acc_t<T> (&in)[kIn], acc_t<T> (&out)[kOut]) const {
    using A = acc_t<T>;
    const A s = sigmoid_acc(in[0]);
    const A silu = in[0] * s;
    out[0] = in[2] * in[1] * s * (static_cast<A>(1) + in[0] * (static_cast<A>(1) - s));
    out[1] = in[2] * silu;
  }
};

template <typename T, int VEC>
struct AddForward : OneWave {
  static constexpr int kIn = 2;   // a, b
  static constexpr int kOut = 1;  // a + b, rounded once as eager's add
  __device__ void operator()(const acc_t<T> (&in)[kIn], acc_t<T> (&out)[kOut]) const {
    out[0] = in[0] + in[1];
  }
};

template <typename T, int N>
struct Pointers {
  T* p[N];
};

template <typename T, typename F>
__device__ __forceinline__ void map_one(const Pointers<const T, F::kIn>& in,
                                        const Pointers<T, F::kOut>& out, int64_t i, const F& f) {
  acc_t<T> a[F::kIn];
  acc_t<T> b[F::kOut];
#pragma unroll
  for (int k = 0; k < F::kIn; ++k) a[k] = to_acc(in.p[k][i]);
  f(a, b);
#pragma unroll
  for (int k = 0; k < F::kOut; ++k) out.p[k][i] = from_acc<T>(b[k]);
}

template <typename T, int VEC, typename F>
__global__ void __launch_bounds__(F::kThreads)
    map_kernel(Pointers<const T, F::kIn> in, Pointers<T, F::kOut> out, int64_t n, F f) {
  using A = acc_t<T>;
  using V = Vec<T, VEC>;
  constexpr int kU = F::kUnroll;
  const int64_t n_vec = n / VEC;
  const int64_t tiles = (n_vec + F::kThreads * kU - 1) / (F::kThreads * kU);
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t first = tile * F::kThreads * kU + threadIdx.x;
    V v[kU][F::kIn];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t i = first + u * F::kThreads;
#pragma unroll
      for (int k = 0; k < F::kIn; ++k) {
        if (i < n_vec) v[u][k] = reinterpret_cast<const V*>(in.p[k])[i];
      }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t i = first + u * F::kThreads;
      if (i >= n_vec) break;
      V w[F::kOut];
#pragma unroll
      for (int j = 0; j < VEC; ++j) {
        A a[F::kIn];
        A b[F::kOut];
#pragma unroll
        for (int k = 0; k < F::kIn; ++k) a[k] = to_acc(v[u][k].v[j]);
        f(a, b);
#pragma unroll
        for (int k = 0; k < F::kOut; ++k) w[k].v[j] = from_acc<T>(b[k]);
      }
#pragma unroll
      for (int k = 0; k < F::kOut; ++k) reinterpret_cast<V*>(out.p[k])[i] = w[k];
    }
  }
  if (VEC > 1 && blockIdx.x == 0 && threadIdx.x < n - n_vec * VEC) {
    map_one<T>(in, out, n_vec * VEC + threadIdx.x, f);
  }
}

template <typename T, int VEC, typename F>
void launch_map_vec(Pointers<const T, F::kIn> in, Pointers<T, F::kOut> out, int64_t n,
                    cudaStream_t stream) {
  const auto kernel = map_kernel<T, VEC, F>;
  const int64_t per_tile = static_cast<int64_t>(F::kThreads) * F::kUnroll;
  const int64_t tiles = std::max<int64_t>(1, (n / VEC + per_tile - 1) / per_tile);
  int64_t grid = std::min<int64_t>(tiles, kMaxGridX);
  if (F::kPersistent) {
    const int64_t resident = resident_blocks(kernel, F::kThreads, 0);
    if (resident > 0) grid = std::min(grid, resident);
  }
  kernel<<<static_cast<unsigned>(grid), F::kThreads, 0, stream>>>(in, out, n, F{});
}

// 16-byte vectors when every pointer is aligned (a ragged tail of n is block 0's).
template <typename T, template <typename, int> class F>
void launch_map(Pointers<const T, F<T, 1>::kIn> in, Pointers<T, F<T, 1>::kOut> out, int64_t n,
                cudaStream_t stream) {
  constexpr int kVec = vec16_elems<T>();
  bool vec_ok = true;
  for (const T* p : in.p) vec_ok = vec_ok && aligned16(p);
  for (T* p : out.p) vec_ok = vec_ok && aligned16(p);
  if (vec_ok) {
    launch_map_vec<T, kVec, F<T, kVec>>(in, out, n, stream);
  } else {
    launch_map_vec<T, 1, F<T, 1>>(in, out, n, stream);
  }
}

template <Activation kAct>
struct ActForwardOf {
  template <typename T, int VEC>
  using type = ActForward<T, VEC, kAct>;
};

template <Activation kAct>
struct ActBackwardOf {
  template <typename T, int VEC>
  using type = ActBackward<T, VEC, kAct>;
};

}  // namespace

template <typename T>
void launch_act(const T* x, T* y, int64_t n, Activation act, cudaStream_t stream) {
  const Pointers<const T, 1> in{{x}};
  const Pointers<T, 1> out{{y}};
  switch (act) {
    case Activation::kRelu:
      return launch_map<T, ActForwardOf<Activation::kRelu>::template type>(in, out, n, stream);
    case Activation::kGeluErf:
      return launch_map<T, ActForwardOf<Activation::kGeluErf>::template type>(in, out, n, stream);
    case Activation::kGeluTanh:
      return launch_map<T, ActForwardOf<Activation::kGeluTanh>::template type>(in, out, n, stream);
    case Activation::kSilu:
      return launch_map<T, ActForwardOf<Activation::kSilu>::template type>(in, out, n, stream);
  }
}

template <typename T>
void launch_act_backward(const T* x, const T* dy, T* dx, int64_t n, Activation act,
                         cudaStream_t stream) {
  const Pointers<const T, 2> in{{x, dy}};
  const Pointers<T, 1> out{{dx}};
  switch (act) {
    case Activation::kRelu:
      return launch_map<T, ActBackwardOf<Activation::kRelu>::template type>(in, out, n, stream);
    case Activation::kGeluErf:
      return launch_map<T, ActBackwardOf<Activation::kGeluErf>::template type>(in, out, n, stream);
    case Activation::kGeluTanh:
      return launch_map<T, ActBackwardOf<Activation::kGeluTanh>::template type>(in, out, n, stream);
    case Activation::kSilu:
      return launch_map<T, ActBackwardOf<Activation::kSilu>::template type>(in, out, n, stream);
  }
}

template <typename T>
void launch_swiglu(const T* a, const T* b, T* y, int64_t n, cudaStream_t stream) {
  launch_map<T, SwigluForward>(Pointers<const T, 2>{{a, b}}, Pointers<T, 1>{{y}}, n, stream);
}

template <typename T>
void launch_swiglu_backward(const T* a, const T* b, const T* dy, T* da, T* db, int64_t n,
                            cudaStream_t stream) {
  launch_map<T, SwigluBackward>(Pointers<const T, 3>{{a, b, dy}}, Pointers<T, 2>{{da, db}}, n,
                                stream);
}

template <typename T>
void launch_add(const T* a, const T* b, T* y, int64_t n, cudaStream_t stream) {
  launch_map<T, AddForward>(Pointers<const T, 2>{{a, b}}, Pointers<T, 1>{{y}}, n, stream);
}

#define KA_INSTANTIATE_POINTWISE(T)                                                         \
  template void launch_add<T>(const T*, const T*, T*, int64_t, cudaStream_t);              \
  template void launch_act<T>(const T*, T*, int64_t, Activation, cudaStream_t);            \
  template void launch_act_backward<T>(const T*, const T*, T*, int64_t, Activation,         \
                                       cudaStream_t);                                       \
  template void launch_swiglu<T>(const T*, const T*, T*, int64_t, cudaStream_t);           \
  template void launch_swiglu_backward<T>(const T*, const T*, const T*, T*, T*, int64_t,    \
                                          cudaStream_t);

KA_INSTANTIATE_POINTWISE(float)
KA_INSTANTIATE_POINTWISE(double)
KA_INSTANTIATE_POINTWISE(__half)
KA_INSTANTIATE_POINTWISE(__nv_bfloat16)
#undef KA_INSTANTIATE_POINTWISE

}  // namespace ka
