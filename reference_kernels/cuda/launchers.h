// Host launchers of the CUDA reference kernels: plain C++ over raw pointers and a stream.
//
// Included by the .cu files (which define them) and by binding.cpp (which calls them), so it
// needs nothing beyond the CUDA runtime and the fp16/bf16 headers. Every launcher issues
// exactly one kernel launch on `stream` and does not check errors itself: the caller's
// C10_CUDA_KERNEL_LAUNCH_CHECK() right after the call sees that launch's status.
// Tensors are dense row-major [rows, cols]; rows >= 1, 1 <= cols <= INT32_MAX (callers check).
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

namespace ka {

// Accumulation type: float for fp32/fp16/bf16, double for fp64.
template <typename T> struct AccType { using type = float; };
template <> struct AccType<double> { using type = double; };
template <typename T> using acc_t = typename AccType<T>::type;

// Values of the int flag that bias_act takes from Python (keep in step with bias_act.py).
enum class Activation : int { kRelu = 0, kGeluErf = 1, kGeluTanh = 2, kSilu = 3 };

// y[r, :] = softmax(x[r, :]).
template <typename T>
void launch_softmax(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream);

// y = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps) per row; weight may be null,
// rstd_out (one value per row) may be null.
template <typename T>
void launch_rms_norm(const T* x, const T* weight, T* y, acc_t<T>* rstd_out, int64_t rows,
                     int64_t cols, double eps, cudaStream_t stream);

// y = (x - mean) * rstd * weight + bias per row (biased variance); weight, bias, mean_out and
// rstd_out may each be null.
template <typename T>
void launch_layer_norm(const T* x, const T* weight, const T* bias, T* y, acc_t<T>* mean_out,
                       acc_t<T>* rstd_out, int64_t rows, int64_t cols, double eps,
                       cudaStream_t stream);

// y[r, c] = act(x[r, c] + bias[c]).
template <typename T>
void launch_bias_act(const T* x, const T* bias, T* y, int64_t rows, int64_t cols,
                     Activation act, cudaStream_t stream);

}  // namespace ka
