// Element-wise kernels over n contiguous elements: the activations' backward, SwiGLU
// (y = silu(a) * b) forward and backward, and the residual add of add_rms_norm/add_layer_norm.
// (The activations' forward is bias_act.cu with no bias.)
//
// Bytes per call: act backward reads x and dy and writes dx (3 n sizeof(T)); swiglu reads a and
// b and writes y (3 n), its backward reads a, b, dy and writes da, db (5 n); add 3 n. One grid of
// resident blocks walks the 16-byte vectors (grid-stride loop); every value is computed in
// float (double for fp64) and rounded once.
#include <algorithm>

#include "activations.h"
#include "device_math.h"
#include "launchers.h"

namespace ka {
namespace {

constexpr int kThreads = 256;

template <typename T, int VEC, Activation kAct>
struct ActBackward {
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
struct SwigluForward {
  static constexpr int kIn = 2;   // a, b
  static constexpr int kOut = 1;  // y
  __device__ void operator()(const acc_t<T> (&in)[kIn], acc_t<T> (&out)[kOut]) const {
    out[0] = in[0] * sigmoid_acc(in[0]) * in[1];
  }
};

template <typename T, int VEC>
struct SwigluBackward {
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
struct AddForward {
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

template <typename T, int VEC, typename F>
__global__ void __launch_bounds__(kThreads)
    map_kernel(Pointers<const T, F::kIn> in, Pointers<T, F::kOut> out, int64_t n_vec, F f) {
  using A = acc_t<T>;
  using V = Vec<T, VEC>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n_vec;
       i += step) {
    V v[F::kIn];
#pragma unroll
    for (int k = 0; k < F::kIn; ++k) v[k] = reinterpret_cast<const V*>(in.p[k])[i];
    V w[F::kOut];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
      A a[F::kIn];
      A b[F::kOut];
#pragma unroll
      for (int k = 0; k < F::kIn; ++k) a[k] = to_acc(v[k].v[j]);
      f(a, b);
#pragma unroll
      for (int k = 0; k < F::kOut; ++k) w[k].v[j] = from_acc<T>(b[k]);
    }
#pragma unroll
    for (int k = 0; k < F::kOut; ++k) reinterpret_cast<V*>(out.p[k])[i] = w[k];
  }
}

template <typename T, int VEC, typename F>
void launch_map_vec(Pointers<const T, F::kIn> in, Pointers<T, F::kOut> out, int64_t n,
                    cudaStream_t stream) {
  const auto kernel = map_kernel<T, VEC, F>;
  const int64_t n_vec = n / VEC;
  const int64_t blocks = (n_vec + kThreads - 1) / kThreads;
  const int64_t resident = resident_blocks(kernel, kThreads, 0);
  const int64_t grid = std::max<int64_t>(1, resident > 0 ? std::min(blocks, resident) : blocks);
  kernel<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(in, out, n_vec, F{});
}

// 16-byte vectors when every pointer is aligned and n is a whole number of vectors.
template <typename T, template <typename, int> class F>
void launch_map(Pointers<const T, F<T, 1>::kIn> in, Pointers<T, F<T, 1>::kOut> out, int64_t n,
                cudaStream_t stream) {
  constexpr int kVec = vec16_elems<T>();
  bool vec_ok = n % kVec == 0;
  for (const T* p : in.p) vec_ok = vec_ok && aligned16(p);
  for (T* p : out.p) vec_ok = vec_ok && aligned16(p);
  if (vec_ok) {
    launch_map_vec<T, kVec, F<T, kVec>>(in, out, n, stream);
  } else {
    launch_map_vec<T, 1, F<T, 1>>(in, out, n, stream);
  }
}

template <Activation kAct>
struct ActBackwardOf {
  template <typename T, int VEC>
  using type = ActBackward<T, VEC, kAct>;
};

}  // namespace

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
