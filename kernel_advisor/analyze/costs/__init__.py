"""FLOPs and minimum bytes per aten op call, from the shapes, dtypes and concrete values
torch.profiler records (record_shapes=True). Pure functions: no tensors are created.

    op_cost("aten::addmm", [[768], [128, 256], [256, 768], [], []],
            ["float32"] * 3 + ["scalar"] * 2, ["", "", "", "1", "1"])
    -> OpCost(flops=50331648.0, bytes=1018880.0, compute_dtype="float32",
              uses_tensor_cores=True)

Formulas are registered per op name in the family modules below; op_cost returns None for
an op or an argument pattern they do not cover (unknown is not zero).
"""
from __future__ import annotations

from kernel_advisor.analyze.costs import (attention, conv, copies, einsum, indexing, losses,  # noqa: F401
                                          matmul, norms, pointwise, reductions, rnn, sampling)
from kernel_advisor.analyze.costs.registry import (OpCost, cost_arguments, inductor_kernel_bytes, modelled_op_names,
                                                   op_cost)

__all__ = ["OpCost", "op_cost", "cost_arguments", "modelled_op_names", "inductor_kernel_bytes"]
