// Tensor-level cross-entropy (cross_entropy.cu): checks, allocation, dtype dispatch, launches on
// the current stream.
#include <limits>
#include <tuple>

#include <ATen/Dispatch.h>

#include "launchers.h"
#include "ops.h"
#include "tensors.h"

namespace ka_torch {
namespace {

ka::Reduction reduction_of(int64_t reduction) {
  TORCH_CHECK(reduction >= 0 && reduction <= 2,
              "reduction must be 0 (none), 1 (mean) or 2 (sum), got ", reduction);
  return static_cast<ka::Reduction>(reduction);
}

void check_logits(const at::Tensor& logits, const at::Tensor& target) {
  check_x(logits);
  TORCH_CHECK(logits.dim() == 2 && logits.size(1) >= 1,
              "logits must be (rows, classes) with classes >= 1, got ", logits.sizes());
  TORCH_CHECK(logits.size(0) <= std::numeric_limits<int32_t>::max(),
              "logits have more than 2^31 - 1 rows");
  TORCH_CHECK(target.device() == logits.device() && target.scalar_type() == at::kLong &&
                  target.dim() == 1 && target.size(0) == logits.size(0) &&
                  target.is_contiguous(),
              "target must be a contiguous int64 tensor of shape (", logits.size(0), ") on ",
              logits.device());
}

at::ScalarType acc_type(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor> cross_entropy(const at::Tensor& logits,
                                                             const at::Tensor& target,
                                                             int64_t ignore_index,
                                                             int64_t reduction) {
  check_logits(logits, target);
  const ka::Reduction r = reduction_of(reduction);
  const c10::cuda::CUDAGuard guard(logits.device());
  const int64_t rows = logits.size(0);
  const int64_t cols = logits.size(1);
  const auto acc = logits.options().dtype(acc_type(logits));
  const bool reduce = r != ka::Reduction::kNone;
  at::Tensor loss = reduce ? at::empty({}, logits.options()) : at::empty({rows}, logits.options());
  at::Tensor lse = at::empty({rows}, acc);
  at::Tensor count = at::empty({reduce ? 1 : 0}, acc);
  if (rows == 0) {
    // eager: the mean of no targets is NaN, their sum 0.
    if (reduce) {
      loss.fill_(r == ka::Reduction::kMean ? std::numeric_limits<double>::quiet_NaN() : 0.0);
      count.zero_();
    }
    return {loss, lse, count};
  }
  at::Tensor row_loss = reduce ? at::empty({rows}, acc) : at::Tensor();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, logits.scalar_type(),
                                  "ka_cross_entropy", [&] {
    ka::launch_cross_entropy(device_ptr<scalar_t>(logits), target.data_ptr<int64_t>(),
                             ignore_index, stat_ptr<scalar_t>(lse),
                             reduce ? stat_ptr<scalar_t>(row_loss) : nullptr,
                             device_ptr<scalar_t>(loss),
                             reduce ? stat_ptr<scalar_t>(count) : nullptr, rows, cols, r,
                             at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {loss, lse, count};
}

at::Tensor cross_entropy_backward(const at::Tensor& dloss, const at::Tensor& logits,
                                  const at::Tensor& target, const at::Tensor& lse,
                                  const at::Tensor& count, int64_t ignore_index,
                                  int64_t reduction) {
  check_logits(logits, target);
  const ka::Reduction r = reduction_of(reduction);
  const int64_t rows = logits.size(0);
  TORCH_CHECK(dloss.device() == logits.device() && dloss.scalar_type() == logits.scalar_type() &&
                  dloss.is_contiguous() &&
                  dloss.numel() == (r == ka::Reduction::kNone ? rows : 1),
              "dloss must be a contiguous ", logits.scalar_type(), " tensor holding ",
              r == ka::Reduction::kNone ? rows : 1, " values");
  check_stat(lse, logits, logits.size(1), "lse");
  if (r == ka::Reduction::kMean) {
    TORCH_CHECK(count.numel() == 1 && count.scalar_type() == acc_type(logits) &&
                    count.device() == logits.device(),
                "count must hold the forward's count of targets");
  }
  const c10::cuda::CUDAGuard guard(logits.device());
  at::Tensor dx = at::empty(logits.sizes(), logits.options());
  if (rows == 0) return dx;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, logits.scalar_type(),
                                  "ka_cross_entropy_backward", [&] {
    ka::launch_cross_entropy_backward(
        device_ptr<scalar_t>(logits), target.data_ptr<int64_t>(), stat_ptr<scalar_t>(lse),
        device_ptr<scalar_t>(dloss),
        r == ka::Reduction::kMean ? stat_ptr<scalar_t>(count) : nullptr,
        device_ptr<scalar_t>(dx), rows, logits.size(1), ignore_index, r,
        at::cuda::getCurrentCUDAStream());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return dx;
}

}  // namespace ka_torch
