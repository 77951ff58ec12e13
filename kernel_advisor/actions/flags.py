"""Backend flags set for the duration of a step and restored after it."""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch

from kernel_advisor.actions.base import Action, NotApplicable, Variant
from kernel_advisor.collect.loader import LoadedModel


@contextlib.contextmanager
def backend_flags(assign: dict[str, object]) -> Iterator[None]:
    """Set attributes like 'cudnn.benchmark' under torch.backends; restore them on exit."""
    saved = {path: current(path) for path in assign}
    try:
        for path, value in assign.items():
            _set(path, value)
        yield
    finally:
        for path, value in saved.items():
            _set(path, value)


def flags_context(assign: dict[str, object]) -> Callable[[], contextlib.AbstractContextManager]:
    return lambda: backend_flags(assign)


def _owner(path: str):
    *parents, attr = path.split(".")
    obj = torch.backends
    for p in parents:
        obj = getattr(obj, p)
    return obj, attr


def current(path: str) -> object:
    obj, attr = _owner(path)
    return getattr(obj, attr)


def _set(path: str, value: object) -> None:
    obj, attr = _owner(path)
    setattr(obj, attr, value)


# ------------------------------------------------------------
# `tf32`: float32 matmuls and convolutions on TF32 tensor cores (10-bit mantissa).

# NB: TF32 rounds the inputs of each product to a 10-bit mantissa (relative error ~2^-11);
# the gate holds the model to bfloat16-class tolerances instead of float32 ones.
TF32_TOLERANCE = (2e-2, 2e-2)


def prepare_tf32(loaded: LoadedModel, mode: str) -> Variant:
    if loaded.device.type != "cuda":
        raise NotApplicable("TF32 is a tensor-core path of CUDA devices; this run is on the CPU")
    if torch.cuda.get_device_capability(loaded.device) < (8, 0):
        raise NotApplicable("TF32 needs compute capability 8.0 or newer")
    flags = {"cuda.matmul.allow_tf32": True, "cudnn.allow_tf32": True}
    if all(current(k) for k in flags):
        raise NotApplicable("TF32 is already on for matmuls and convolutions")
    return Variant("tf32", loaded.model, "allow_tf32 on for matmul and cuDNN", context=flags_context(flags),
                   tolerance=lambda dtype: TF32_TOLERANCE)


TF32 = Action("tf32", "TF32 for float32 matmul and convolution", "library", prepare_tf32)


# ------------------------------------------------------------
# `cudnn_benchmark`: torch.backends.cudnn.benchmark = True (cuDNN times its algorithms once per shape).

def prepare_cudnn_benchmark(loaded: LoadedModel, mode: str) -> Variant:
    if loaded.device.type != "cuda":
        raise NotApplicable("cuDNN runs on CUDA devices only; this run is on the CPU")
    if torch.backends.cudnn.benchmark:
        raise NotApplicable("torch.backends.cudnn.benchmark is already on")
    return Variant("cudnn_benchmark", loaded.model, "torch.backends.cudnn.benchmark = True",
                   context=flags_context({"cudnn.benchmark": True}))


CUDNN_BENCHMARK = Action("cudnn_benchmark", "cudnn.benchmark = True", "library", prepare_cudnn_benchmark, effort=0)
