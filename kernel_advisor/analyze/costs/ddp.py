"""DistributedDataParallel's reducer: the gradient copies around each bucket's all-reduce.

The reducer records them as record_functions with the parameter's gradient as the only input
(torch/csrc/distributed/c10d/reducer.cpp); their device time is the user's DDP overhead,
separate from the collective itself (which is costed on the interconnect roof, comms.csv).
"""
from __future__ import annotations

from kernel_advisor.analyze.costs.call import OpCall
from kernel_advisor.analyze.costs.common import io_cost, written
from kernel_advisor.analyze.costs.registry import OpCost, register

# NB: these are the reducer's names in torch 2.x; a renamed record_function is unmodelled.
COPY_BUCKET_TO_GRAD = "torch.distributed.ddp.reducer::copy_bucket_to_grad"
MUL_OUT = "torch::distributed::reducer::mul_out"
RECORD_FUNCTIONS = (COPY_BUCKET_TO_GRAD, MUL_OUT)  # trace names, not operators in torch.ops


@register(COPY_BUCKET_TO_GRAD)
def copy_bucket_to_grad(call: OpCall) -> OpCost:
    # grad.copy_(bucket_view) after the all-reduce: the bucket slice read, the gradient written.
    grad = call.tensor(0)
    return io_cost(0, [grad], [written(grad.shape, grad.dtype)], grad.dtype)


@register(MUL_OUT)
def mul_out(call: OpCall) -> OpCost:
    # at::mul_out(bucket_view, grad, 1/world_size) before the all-reduce: one multiply per
    # element, the gradient read, its bucket slice written.
    grad = call.tensor(0)
    return io_cost(grad.numel, [grad], [written(grad.shape, grad.dtype)], grad.dtype)
