"""The kernel registry as data: what each kernel replaces, where it runs, how exact it is.

One KernelSpec per kernel, declared next to the kernel (reference_kernels/triton/*.py,
reference_kernels/cuda/*.py) and collected here. Nothing is imported from triton or
built with nvcc until a kernel is actually loaded, so listing is cheap and works on a
machine that has neither.
"""
from __future__ import annotations

import importlib
import shutil
from dataclasses import dataclass, field
from typing import Callable, Mapping

import torch

# Per-dtype tolerances: (rtol on the relative error norm ||out-ref||/||ref||, atol elementwise)
Tolerances = Mapping[str, tuple[float, float]]
DEFAULT_TOLERANCES: Tolerances = {
    "float32": (1e-5, 1e-5),
    "float16": (2e-3, 2e-3),
    "bfloat16": (1e-2, 1e-2),
    "float64": (1e-10, 1e-12),
}


@dataclass(frozen=True)
class Capability:
    """What a kernel needs from the machine; `reason_if_unsatisfied` says why it cannot run."""

    backend: str  # "triton" or "cuda"
    min_compute_capability: tuple[int, int] = (7, 0)
    needs_gpu: bool = False  # True: no CPU path at all (CUDA C++); Triton runs on CPU via TRITON_INTERPRET=1

    def reason_if_unsatisfied(self, device: str = "cuda") -> str | None:
        if self.backend == "triton" and importlib.util.find_spec("triton") is None:
            return "triton is not installed (pip install 'kernel_advisor[triton]')"
        if self.backend == "cuda" and shutil.which("nvcc") is None and not _cuda_home():
            return "nvcc was not found (install the CUDA toolkit or set CUDA_HOME)"
        if device == "cpu":
            if self.needs_gpu:
                return "CUDA C++ kernels need a CUDA GPU; this run is on CPU"
            return None
        if not torch.cuda.is_available():
            return "no CUDA device is visible (torch.cuda.is_available() is False)"
        cap = torch.cuda.get_device_capability()
        if cap < self.min_compute_capability:
            want = ".".join(map(str, self.min_compute_capability))
            return f"needs compute capability >= {want}, this GPU has {cap[0]}.{cap[1]}"
        return None


def _cuda_home() -> str | None:
    try:
        from torch.utils.cpp_extension import CUDA_HOME
    except Exception:  # noqa: BLE001 - an import failure just means "no CUDA toolkit"
        return None
    return CUDA_HOME


@dataclass(frozen=True)
class KernelSpec:
    """One reference kernel.

    `replaces_aten`: aten overloads it can stand in for, e.g. ("aten::_softmax",) — try-kernel
    overrides these through torch.library. `replaces_patterns`: module-level patterns
    (e.g. "rmsnorm-module", "swiglu-mlp", "residual-rmsnorm") swapped at module level.
    `loader` is "module:function" returning the Python callable; `reference` is
    "module:function" for the eager PyTorch reference with the same signature.
    """

    id: str
    title: str
    capability: Capability
    loader: str
    reference: str
    replaces_aten: tuple[str, ...] = ()
    replaces_patterns: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16")
    layouts: tuple[str, ...] = ("contiguous",)
    has_backward: bool = False
    memory_bound: bool = True
    tolerances: Tolerances = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    notes: str = ""

    def reason_if_unsatisfied(self, device: str = "cuda") -> str | None:
        return self.capability.reason_if_unsatisfied(device)

    def load(self) -> Callable:
        return _resolve(self.loader)

    def load_reference(self) -> Callable:
        return _resolve(self.reference)

    def tolerance(self, dtype: torch.dtype | str) -> tuple[float, float]:
        name = str(dtype).replace("torch.", "")
        return self.tolerances.get(name, DEFAULT_TOLERANCES["float32"])


def _resolve(dotted: str) -> Callable:
    module, _, attr = dotted.partition(":")
    return getattr(importlib.import_module(module), attr)


# Modules that declare `SPECS: tuple[KernelSpec, ...]`; importing them must not import triton.
SPEC_MODULES: tuple[str, ...] = (
    "reference_kernels.triton.specs",
    "reference_kernels.cuda.specs",
)


def all_kernels() -> tuple[KernelSpec, ...]:
    specs: list[KernelSpec] = []
    for name in SPEC_MODULES:
        specs.extend(importlib.import_module(name).SPECS)
    ids = [s.id for s in specs]
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise ValueError(f"duplicate kernel ids in the registry: {sorted(dupes)}")
    return tuple(specs)


def get_kernel(kernel_id: str) -> KernelSpec:
    for spec in all_kernels():
        if spec.id == kernel_id:
            return spec
    from difflib import get_close_matches

    from reference_kernels.errors import KernelInputError

    ids = [s.id for s in all_kernels()]
    close = get_close_matches(kernel_id, ids, n=1, cutoff=0.6)
    if close:
        raise KernelInputError(f"unknown kernel id '{kernel_id}'", f"did you mean {close[0]}? (see `advisor kernels`)")
    raise KernelInputError(f"unknown kernel id '{kernel_id}'", f"choose one of: {', '.join(ids)} (see `advisor kernels`)")
