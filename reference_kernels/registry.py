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

from reference_kernels.routes import routes

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
class ShapeClass:
    """A set of row-op shapes as the kernel sees them: `cols` is the reduced length (softmax's
    last dim, the product of a norm's normalized_shape, the vocabulary), `rows` the rest.
    Bounds are inclusive; None is unbounded; empty `dtypes` means every dtype."""

    name: str
    min_rows: int = 1
    max_rows: int | None = None
    min_cols: int = 1
    max_cols: int | None = None
    dtypes: tuple[str, ...] = ()

    def matches(self, rows: int, cols: int, dtype: torch.dtype | str) -> bool:
        name = _dtype_name(dtype)
        return (self.min_rows <= rows and (self.max_rows is None or rows <= self.max_rows)
                and self.min_cols <= cols and (self.max_cols is None or cols <= self.max_cols)
                and (not self.dtypes or name in self.dtypes))


@dataclass(frozen=True)
class Loss:
    """A shape class where the kernel is measured to lose: calls in it go to eager PyTorch.

    `figure`: what was measured (times or fractions of copy bandwidth, what it lost to);
    `source`: where the figure is written down (a file of the repository); `path`: the kernel path the figure measured, so a later change of path
    says which entries need measuring again."""

    shape_class: ShapeClass
    figure: str
    source: str
    path: str = ""

    def reason(self, kernel_id: str) -> str:
        return (f"{kernel_id} loses on {self.shape_class.name} ({self.figure}; "
                f"{self.source})")


# try-kernel's fallback reasons for calls the registry routes to eager start with this.
EAGER_ROUTE = "registry routes to eager: "


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
    # Shape classes measured to lose (to eager or torch.compile): try-kernel sends those
    # calls to eager PyTorch and reports them, so a bundled kernel never makes a call slower.
    loses: tuple[Loss, ...] = ()
    # Shape classes the kernel cannot take at all (beyond its index range, say): eager too.
    refuses: tuple[ShapeClass, ...] = ()

    def reason_if_unsatisfied(self, device: str = "cuda") -> str | None:
        return self.capability.reason_if_unsatisfied(device)

    def eager_route(self, rows: int, cols: int, dtype: torch.dtype | str, grad: bool = False,
                    device: str = "cuda", host_bound: bool = True,
                    dispatch_host_s: float = 0.0, route_tables: Mapping | None = None) -> str:
        """Why a (rows, cols) call of `dtype` goes to eager instead ("" when it stays here).

        `grad`: the call needs a gradient (its measured pass is then fwd+bwd). Beyond the
        spec's own `refuses` and `loses`, CUDA calls follow the routes measured on a GPU
        (reference_kernels/routes.py), for a host-bound step unless `host_bound` is False, with
        `dispatch_host_s` added to the kernel's host time per call there (what the caller's
        substitution costs); the CPU interpreter runs kernels to check them, not for speed, so
        no measured route applies there. `route_tables`: {kernel id: RouteTable} to follow
        instead of the shipped routes (a benchmark judging a routes file)."""
        for c in self.refuses:
            if c.matches(rows, cols, dtype):
                return f"{EAGER_ROUTE}{self.id} cannot take {c.name}"
        for loss in self.loses:
            if loss.shape_class.matches(rows, cols, dtype):
                return EAGER_ROUTE + loss.reason(self.id)
        tables = routes() if route_tables is None else route_tables
        table = tables.get(self.id) if device == "cuda" else None
        reason = table.eager_reason(rows, cols, _dtype_name(dtype), grad, host_bound,
                                    dispatch_host_s * 1e3) if table else ""
        return EAGER_ROUTE + reason if reason else ""

    def load(self) -> Callable:
        return _resolve(self.loader)

    def load_reference(self) -> Callable:
        return _resolve(self.reference)

    def tolerance(self, dtype: torch.dtype | str) -> tuple[float, float]:
        return self.tolerances.get(_dtype_name(dtype), DEFAULT_TOLERANCES["float32"])


def _dtype_name(dtype: torch.dtype | str) -> str:
    return str(dtype).replace("torch.", "")


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
