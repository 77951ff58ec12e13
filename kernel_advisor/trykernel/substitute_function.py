"""Function-level substitution for the compiled variants ("torch.compile + <kernel>").

torch.compile never reaches the dispatcher overrides of substitute_aten.py: Dynamo records
`F.softmax` and Inductor generates its own code for it. A TorchFunctionMode sees the call
first, at the level of `torch.nn.functional`, and Dynamo traces the mode's
`__torch_function__`: a call the kernel supports becomes a call of the kernel's public
function, hence of its `advisor_kernels` operator, inside the compiled graph. Support is
decided by the same adapters as the eager override (trykernel/adapters.py), from the call's
arguments bound to the aten schema's names; a call they refuse stays PyTorch's.

No counting and no per-call check here: both would be Python side effects inside the traced
code. The compiled variant's proof that the kernel runs is the operator's nodes in Dynamo's
graphs (trykernel/compiled.py); its correctness is the per-model gate.

Covered spellings: `F.softmax`, `torch.softmax`, `Tensor.softmax` (likewise log_softmax),
`F.layer_norm`, `F.rms_norm`, `F.gelu`, `F.silu`, `F.cross_entropy`, `torch.mm`, `Tensor.mm`,
`torch.matmul`/`@` on 2-D operands and `F.linear` without a bias (the modules nn.Softmax,
nn.LayerNorm, nn.RMSNorm, nn.GELU, nn.SiLU and nn.CrossEntropyLoss call these). Ops reached
only from inside another op (softmax inside SDPA's math path) are not.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from kernel_advisor.trykernel.adapters import CROSS_ENTROPY_REDUCTIONS, Plan, Prepare



def _same(result: Any) -> Any:
    return result


def _softmax_full(x, dim, dtype):
    if dim is None or not isinstance(x, torch.Tensor):
        return None  # F.softmax's implicit dim (deprecated) is left to PyTorch
    if dtype is not None:
        x = x.to(dtype)  # softmax(x, dtype=d) is softmax(x.to(d))
    return {"self": x, "dim": dim, "half_to_float": False}, _same


def _bind_f_softmax(input, dim=None, _stacklevel=3, dtype=None):
    return _softmax_full(input, dim, dtype)


def _bind_softmax(input, dim, dtype=None):
    return _softmax_full(input, dim, dtype)


def _bind_layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return {"input": input, "normalized_shape": normalized_shape, "weight": weight, "bias": bias,
            "eps": eps}, _same


def _bind_rms_norm(input, normalized_shape, weight=None, eps=None):
    return {"input": input, "normalized_shape": normalized_shape, "weight": weight,
            "eps": eps}, _same


def _bind_gelu(input, approximate="none"):
    return {"self": input, "approximate": approximate}, _same


def _bind_silu(input, inplace=False):
    return None if inplace else ({"self": input}, _same)


_REDUCTION_CODES = {name: code for code, name in CROSS_ENTROPY_REDUCTIONS.items()}


def _bind_cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                        reduce=None, reduction="mean", label_smoothing=0.0):
    if size_average is not None or reduce is not None or reduction not in _REDUCTION_CODES:
        return None  # the legacy arguments are left to PyTorch
    return {"self": input, "target": target, "weight": weight,
            "reduction": _REDUCTION_CODES[reduction], "ignore_index": ignore_index,
            "label_smoothing": label_smoothing}, _same


def _bind_mm(input, mat2):
    return {"self": input, "mat2": mat2}, _same


def _bind_matmul(input, other):
    if not (isinstance(input, torch.Tensor) and isinstance(other, torch.Tensor)
            and input.dim() == 2 and other.dim() == 2):
        return None
    return {"self": input, "mat2": other}, _same


def _bind_linear(input, weight, bias=None):
    if bias is not None or input.dim() < 1 or weight.dim() != 2:
        return None  # a bias makes it aten::addmm, which the matmul kernel does not replace
    lead = input.shape[:-1]
    return ({"self": input.reshape(-1, input.shape[-1]), "mat2": weight.t()},
            lambda out: out.reshape(*lead, out.shape[-1]))


# aten overload a registry kernel replaces -> (torch-level function, binder) pairs
BINDERS: dict[str, tuple[tuple[Callable, Callable], ...]] = {
    "aten::_softmax": ((F.softmax, _bind_f_softmax), (torch.softmax, _bind_softmax),
                       (torch.Tensor.softmax, _bind_softmax)),
    "aten::_log_softmax": ((F.log_softmax, _bind_f_softmax), (torch.log_softmax, _bind_softmax),
                           (torch.Tensor.log_softmax, _bind_softmax)),
    "aten::layer_norm": ((F.layer_norm, _bind_layer_norm),),
    "aten::rms_norm": ((F.rms_norm, _bind_rms_norm),),
    "aten::gelu": ((F.gelu, _bind_gelu),),
    "aten::silu": ((F.silu, _bind_silu),),
    "aten::cross_entropy_loss": ((F.cross_entropy, _bind_cross_entropy),),
    "aten::mm": ((torch.mm, _bind_mm), (torch.Tensor.mm, _bind_mm), (torch.matmul, _bind_matmul),
                 (torch.Tensor.matmul, _bind_matmul), (torch.Tensor.__matmul__, _bind_matmul),
                 (F.linear, _bind_linear)),
}


@dataclass(frozen=True)
class Route:
    """One torch-level function routed to a candidate."""

    func: Callable
    bind: Callable[..., Any]  # the function's arguments -> (aten arguments, finish) or None
    prepare: Prepare  # the adapter: aten arguments -> plan or the reason to stay with PyTorch
    fn: Callable  # the candidate
    has_backward: bool


def routes_for(aten_name: str, prepare: Prepare, fn: Callable, has_backward: bool) -> list[Route]:
    return [Route(func, bind, prepare, fn, has_backward) for func, bind in BINDERS.get(aten_name, ())]


def covers(aten_name: str) -> bool:
    return aten_name in BINDERS


def _needs_grad(full: dict) -> bool:
    return torch.is_grad_enabled() and any(
        isinstance(v, torch.Tensor) and v.requires_grad for v in full.values())


class KernelFunctionMode(TorchFunctionMode):
    """Calls the candidates in place of the torch functions they replace (see module doc)."""

    def __init__(self, routes: Sequence[Route]) -> None:
        super().__init__()
        self.routes = {r.func: r for r in routes}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        route = self.routes.get(func)
        if route is not None:
            out = _try_route(route, args, kwargs)
            if out is not NotImplemented:
                return out
        return func(*args, **kwargs)


def _try_route(route: Route, args: tuple, kwargs: dict) -> Any:
    bound = route.bind(*args, **kwargs)
    if bound is None:
        return NotImplemented
    full, finish = bound
    if not route.has_backward and _needs_grad(full):
        return NotImplemented  # a forward-only kernel above autograd would drop the gradient
    plan = route.prepare(full)
    if not isinstance(plan, Plan):
        return NotImplemented
    return finish(plan.finish(route.fn(*plan.args, **plan.kwargs)))


@contextmanager
def kernel_functions(routes: Sequence[Route]) -> Iterator[None]:
    """The routes active inside; nothing when there are none."""
    if not routes:
        yield
        return
    with KernelFunctionMode(routes):
        yield
