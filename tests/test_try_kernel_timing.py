"""Per-op profiler attribution of a variant's step."""
import contextlib

import torch
from torch.profiler import record_function

from kernel_advisor.trykernel.timing import profiled_op_times


def test_profiled_op_time_counts_only_the_outermost_named_event():
    x = torch.randn(64, 257)

    def step():
        with record_function("try_kernel::demo"):
            for _ in range(3):
                torch.softmax(x, -1)
        return torch.exp(x)

    names = {"aten::softmax", "aten::_softmax"}
    t = profiled_op_times(step, contextlib.nullcontext, names, steps=2, device=torch.device("cpu"))
    assert t.per_name_s["aten::softmax"] > 0
    assert t.per_name_s["aten::_softmax"] == 0.0  # inside aten::softmax: counted there once
    assert t.total_s >= t.per_name_s["aten::softmax"]
    ranged = profiled_op_times(step, contextlib.nullcontext, names | {"try_kernel::demo"}, 2, torch.device("cpu"))
    assert ranged.per_name_s["aten::softmax"] == 0.0  # now inside the named range
    assert ranged.per_name_s["try_kernel::demo"] > 0
