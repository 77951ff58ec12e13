// Host launchers of the CUDA reference kernels: plain C++ over raw pointers and a stream.
//
// Included by the .cu files (which define them) and by binding.cpp (which calls them), so it
// needs nothing beyond the CUDA runtime and the fp16/bf16 headers. Every launcher issues
// one kernel launch on `stream` (launch_norm_backward_params and a reducing
// launch_cross_entropy: two) and does not check errors itself: the caller's
// C10_CUDA_KERNEL_LAUNCH_CHECK() right after the call sees the status (a failed launch's error
// stays pending until read).
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

// Values of cross_entropy's int `reduction` (keep in step with cross_entropy.py).
enum class Reduction : int { kNone = 0, kMean = 1, kSum = 2 };

// y[r, :] = softmax(x[r, :]), or log_softmax(x[r, :]) when `log`.
template <typename T>
void launch_softmax(const T* x, T* y, int64_t rows, int64_t cols, bool log, cudaStream_t stream);

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

// y = act(x) over n elements (pointwise.cu: the activations' forward without a bias).
template <typename T>
void launch_act(const T* x, T* y, int64_t n, Activation act, cudaStream_t stream);

// y = a + b over n elements (the residual add of add_rms_norm / add_layer_norm).
template <typename T>
void launch_add(const T* a, const T* b, T* y, int64_t n, cudaStream_t stream);

// Per row r of the logits x: lse[r] = logsumexp(x[r, :]) and the loss lse[r] - x[r, target[r]]
// (0 where target[r] == ignore_index, NaN for a target outside [0, cols)). kNone writes the
// losses to loss[rows]; kMean / kSum write per-row losses to row_loss[rows], then loss[0] (their
// mean over the targets not ignored, or sum) and count[0] (that number of targets): two launches.
template <typename T>
void launch_cross_entropy(const T* x, const int64_t* target, int64_t ignore_index,
                          acc_t<T>* lse, acc_t<T>* row_loss, T* loss, acc_t<T>* count,
                          int64_t rows, int64_t cols, Reduction reduction, cudaStream_t stream);

// ---- backward (backward.cu, pointwise.cu, cross_entropy.cu); dy is the gradient of y, dx of x.

// dx = (softmax(x) - onehot(target)) * dloss (per row for kNone, dloss[0] / count[0] for kMean).
template <typename T>
void launch_cross_entropy_backward(const T* x, const int64_t* target, const acc_t<T>* lse,
                                   const T* dloss, const acc_t<T>* count, T* dx, int64_t rows,
                                   int64_t cols, int64_t ignore_index, Reduction reduction,
                                   cudaStream_t stream);

// softmax: dx = y * (dy - sum(dy * y)); log_softmax (`log`): dx = dy - exp(y) * sum(dy).
template <typename T>
void launch_softmax_backward(const T* y, const T* dy, T* dx, int64_t rows, int64_t cols,
                             bool log, cudaStream_t stream);

// The dx of rms_norm (mean == null) or layer_norm from the forward's per-row statistics, plus
// `addend` (the gradient of add_*_norm's new residual; null: none); weight may be null.
template <typename T>
void launch_norm_backward_dx(const T* x, const T* dy, const T* weight, const acc_t<T>* mean,
                             const acc_t<T>* rstd, const T* addend, T* dx, int64_t rows,
                             int64_t cols, cudaStream_t stream);

// Row chunks the parameter gradients are summed over first (the size of their partials).
int64_t norm_param_chunks(int64_t rows, int64_t cols);

// dweight = sum over rows of dy * xhat and, when dbias is not null, dbias = sum of dy, as
// per-chunk float partials [chunks, cols] (norm_param_chunks), then summed into the T outputs
// dweight / dbias: two launches. With one chunk, one launch writes the outputs and the
// partials may be null.
template <typename T>
void launch_norm_backward_params(const T* x, const T* dy, const acc_t<T>* mean,
                                 const acc_t<T>* rstd, acc_t<T>* dweight_partial,
                                 acc_t<T>* dbias_partial, T* dweight, T* dbias, int64_t rows,
                                 int64_t cols, cudaStream_t stream);

// out[c] = sum over k < chunks of partial[k, c] (float) rounded to T, for `first` and, when
// `second` is not null, `second` too: one launch.
template <typename T>
void launch_sum_partials(const acc_t<T>* first_partial, T* first, const acc_t<T>* second_partial,
                         T* second, int64_t chunks, int64_t cols, cudaStream_t stream);

// The fused norm backward (norm_backward.cu): dx (as launch_norm_backward_dx) and the weight
// and bias gradients from one read of x and dy. norm_backward_fused_blocks gives its grid for
// this call (the partial rows to allocate: [blocks, cols] floats per gradient), 0 when it does
// not take rows this long; `bias` says whether dbias is asked for. dweight and dbias may be
// null (not asked for); with one block the partials are unused. Two launches (the kernel, then
// launch_sum_partials), one with a single block.
template <typename T>
int64_t norm_backward_fused_blocks(const T* x, const T* dy, const T* weight, const T* addend,
                                   const T* dx, int64_t rows, int64_t cols, bool bias);
template <typename T>
void launch_norm_backward_fused(const T* x, const T* dy, const T* weight, const acc_t<T>* mean,
                                const acc_t<T>* rstd, const T* addend, T* dx,
                                acc_t<T>* dweight_partial, acc_t<T>* dbias_partial, T* dweight,
                                T* dbias, int64_t rows, int64_t cols, int64_t blocks,
                                cudaStream_t stream);

// dx = dy * act'(x) over n elements.
template <typename T>
void launch_act_backward(const T* x, const T* dy, T* dx, int64_t n, Activation act,
                         cudaStream_t stream);

// y = silu(a) * b over n elements; backward: da = dy * b * silu'(a), db = dy * silu(a).
template <typename T>
void launch_swiglu(const T* a, const T* b, T* y, int64_t n, cudaStream_t stream);
template <typename T>
void launch_swiglu_backward(const T* a, const T* b, const T* dy, T* da, T* db, int64_t n,
                            cudaStream_t stream);

}  // namespace ka
