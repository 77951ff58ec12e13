"""Battery fixture: user kernels for `try-kernel --impl user_kernels.py:NAME --op aten::_softmax`.

aten::_softmax(Tensor self, int dim, bool half_to_float) -> Tensor
"""
import os
import time
from pathlib import Path

import torch


def good_softmax(x, dim, half_to_float):
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def raising_softmax(x, dim, half_to_float):
    raise RuntimeError("battery: kernel launch failed")


def wrong_shape_softmax(x, dim, half_to_float):
    return good_softmax(x, dim, half_to_float)[..., :-1]


def wrong_dtype_softmax(x, dim, half_to_float):
    return good_softmax(x, dim, half_to_float).double()


def writes_nothing_softmax(x, dim, half_to_float):
    return torch.empty_like(x)


def wrong_signature_softmax(x):
    return x


def slow_softmax(x, dim, half_to_float):
    """Appends a line to ADVISOR_BATTERY_MARKER on every call (proof it is installed), then sleeps."""
    marker = os.environ.get("ADVISOR_BATTERY_MARKER")
    if marker:
        with open(marker, "a") as f:
            f.write("call\n")
    time.sleep(0.05)
    return good_softmax(x, dim, half_to_float)


def interrupting_softmax(x, dim, half_to_float):
    """Appends to ADVISOR_BATTERY_MARKER on every call; the second call is where Ctrl-C lands."""
    marker = Path(os.environ["ADVISOR_BATTERY_MARKER"])
    with open(marker, "a") as f:
        f.write("call\n")
    if len(marker.read_text().splitlines()) >= 2:
        raise KeyboardInterrupt
    return good_softmax(x, dim, half_to_float)


NOT_A_FUNCTION = 3  # --impl user_kernels.py:NOT_A_FUNCTION names something that is not callable
