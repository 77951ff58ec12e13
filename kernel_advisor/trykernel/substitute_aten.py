"""Scoped aten overrides through torch.library: the user's code stays as written.

`override_aten` registers a Python kernel for one aten op on the run's device and tears
it down on exit, exceptions and KeyboardInterrupt included (`Library._destroy` restores
the previous kernel). Ops with a backend kernel (`_softmax`, `gelu`, `silu`) are overridden
at the backend key (CPU/CUDA): autograd still runs PyTorch's derivative formula around
the candidate, so forward-only kernels work in training. Composite ops (`layer_norm`,
`rms_norm`) have no backend kernel of their own; they are overridden at the Autograd key
(and the backend key, which inference_mode dispatches to).

Every entry in the dispatcher goes through the override, so F.softmax, torch.softmax,
Tensor.softmax and nn.Softmax are all caught. Inputs the candidate does not support go to
the original kernel (`torch.library.get_kernel`, torch >= 2.9), and are counted as
fallbacks with their reason.
"""
from __future__ import annotations

import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from kernel_advisor.errors import EnvironmentCapabilityError, UserInputError
from kernel_advisor.trykernel.adapters import Plan, Prepare, Route, aten_convention, reference_op, routed
from kernel_advisor.trykernel.capture import CallLog, invoke, reentrant


@dataclass(frozen=True)
class AtenAdapter:
    """How one aten overload is routed to a candidate."""

    op: torch._ops.OpOverload
    prepare: Prepare  # aten arguments -> the candidate's call, or the reason to fall back
    profile_names: tuple[str, ...]  # profiler event names whose device time is this op's

    @property
    def name(self) -> str:  # "aten::_softmax", "aten::softmax.int"
        return self.op.name()

    @property
    def composite(self) -> bool:
        return has_kernel(self.name, "CompositeImplicitAutograd") and not (
            has_kernel(self.name, "CPU") or has_kernel(self.name, "CUDA"))

    def dispatch_keys(self, device_type: str) -> tuple[str, ...]:
        backend = {"cuda": "CUDA", "cpu": "CPU"}[device_type]
        return (f"Autograd{backend}", backend) if self.composite else (backend,)


def resolve_op(text: str) -> torch._ops.OpOverload:
    """'aten::_softmax', '_softmax', 'aten.softmax.int' -> the OpOverload."""
    name = text.strip()
    for prefix in ("torch.ops.aten.", "aten::", "aten."):
        if name.startswith(prefix):
            name = name[len(prefix):]
            break
    base, _, overload = name.partition(".")
    packet = getattr(torch.ops.aten, base, None) if base else None
    if packet is None or not isinstance(packet, torch._ops.OpOverloadPacket):
        raise UserInputError(f"unknown aten op '{text}'",
                             "name an aten op as the profiler shows it, e.g. --op aten::_softmax")
    overloads = packet.overloads()
    functional = [o for o in overloads if not o.endswith("out")]  # out= variants are never what runs
    chosen = overload or _implicit_overload(packet, functional)
    if chosen not in overloads:
        names = ", ".join(f"aten::{base}.{o}" if o != "default" else f"aten::{base}" for o in functional)
        raise UserInputError(f"aten::{base} has no overload '{overload}'" if overload
                             else f"aten::{base} has several overloads", f"pick one of: {names}")
    return getattr(packet, chosen)


def _implicit_overload(packet, functional: list[str]) -> str:
    """The overload a bare profiler name means: the only one, or a tensor `default`.

    "aten::mm" is aten.mm.default even though torch also has mm.dtype; but aten.add.default
    is TorchScript's Scalar + Scalar, never what a tensor op ran, so "aten::add" stays ambiguous.
    """
    if len(functional) == 1:
        return functional[0]
    if "default" in functional:
        args = packet.default._schema.arguments
        if args and str(args[0].type) == "Tensor":
            return "default"
    return ""


def has_kernel(name: str, key: str) -> bool:
    return bool(torch._C._dispatch_has_kernel_for_dispatch_key(name, key))


def user_adapter(op: torch._ops.OpOverload) -> AtenAdapter:
    """A user's --impl takes the op's own arguments and returns the op's own outputs."""
    family = reference_op(op.name())  # profile under the public name too: aten::softmax holds _softmax
    names = family.profile_names if family is not None and family.overload == op.name() else ()
    return AtenAdapter(op=op, prepare=aten_convention(op._schema),
                       profile_names=tuple(dict.fromkeys((*names, op.name().split(".")[0]))))


@contextmanager
def override_aten(adapter: AtenAdapter, fn: Callable, device_type: str, log: CallLog,
                  check: bool, tolerance: Callable[[torch.dtype], tuple[float, float]]) -> Iterator[CallLog]:
    """While inside, every call of `adapter.op` on `device_type` goes through `fn`."""
    keys = adapter.dispatch_keys(device_type)
    originals = {key: _original_kernel(adapter, key) for key in keys}
    lib = torch.library.Library("aten", "IMPL")
    try:
        with warnings.catch_warnings():
            # "Overriding a previously registered kernel" is exactly what we mean to do.
            warnings.simplefilter("ignore", UserWarning)
            for key in keys:
                kernel = _make_kernel(adapter, fn, originals[key], log, check, tolerance)
                lib.impl(adapter.op.name().split("::")[1], kernel, key, with_keyset=True)
        yield log
    finally:
        lib._destroy()


def _make_kernel(adapter: AtenAdapter, fn: Callable, original: Callable, log: CallLog, check: bool,
                 tolerance: Callable[[torch.dtype], tuple[float, float]]) -> Callable:
    schema = adapter.op._schema

    def kernel(keyset, *args, **kwargs):
        def run_original():
            return original(keyset, *args, **kwargs)

        if reentrant():  # called from inside a candidate or a check: never the candidate again
            return run_original()
        full = bind_schema(schema, args, kwargs)
        plan = adapter.prepare(full)
        if isinstance(plan, str):
            log.fallback(plan)
            return run_original()
        return invoke(log, lambda: plan.finish(_call(fn, plan, record_graph)), run_original,
                      check, tolerance(_first_dtype(full)))

    # Below autograd (backend key) PyTorch's own derivative formula wraps the result, so the
    # candidate's autograd graph would be dead weight holding saved tensors.
    record_graph = adapter.composite
    return kernel


def _call(fn: Callable, plan: Plan, record_graph: bool) -> Any:
    if record_graph:
        return fn(*plan.args, **plan.kwargs)
    with torch.no_grad():
        return fn(*plan.args, **plan.kwargs)


def bind_schema(schema, args: tuple, kwargs: dict) -> dict[str, Any]:
    """Every schema argument by name; Python kernels receive trailing defaults stripped."""
    full: dict[str, Any] = {}
    positional = iter(args)
    for arg in schema.arguments:
        if not arg.kwarg_only:
            value = next(positional, _MISSING)
        else:
            value = kwargs.get(arg.name, _MISSING)
        if value is _MISSING:
            value = arg.default_value if arg.has_default_value() else None
        full[arg.name] = value
    return full


_MISSING = object()


def _first_dtype(full: dict[str, Any]) -> torch.dtype:
    for v in full.values():
        if isinstance(v, torch.Tensor):
            return v.dtype
    return torch.float32


def _original_kernel(adapter: AtenAdapter, key: str) -> Callable:
    """The kernel the dispatcher would run for `key` now, callable as kernel(keyset, ...)."""
    get_kernel = getattr(torch.library, "get_kernel", None)
    if get_kernel is not None:
        return get_kernel(adapter.name, key).call_boxed
    if adapter.composite:  # NB: older torch: the composite kernel is the op's decomposition
        return lambda keyset, *a, **k: adapter.op.decompose(*a, **k)
    from torch._decomp import decomposition_table

    decomp = decomposition_table.get(adapter.op)
    if decomp is None:
        raise EnvironmentCapabilityError(
            f"torch {torch.__version__} has no torch.library.get_kernel and no decomposition of "
            f"{adapter.name} to fall back to", "use torch >= 2.9 for try-kernel")
    return lambda keyset, *a, **k: decomp(*a, **k)


def reference_adapter(aten_name: str, dtypes: tuple[str, ...], has_backward: bool,
                      route: Route | None = None) -> AtenAdapter | None:
    """The adapter for a registry kernel's `replaces_aten` entry; None if try-kernel has none.
    `route` (KernelSpec.eager_route) sends the shape classes the kernel loses to eager."""
    ref = reference_op(aten_name)
    if ref is None:
        return None
    prepare = routed(ref.prepare_factory(dtypes, has_backward), ref.row_shape, route)
    return AtenAdapter(op=resolve_op(ref.overload), prepare=prepare, profile_names=ref.profile_names)


def dispatch_cost_s(device: torch.device | str, calls: int = 200, repeats: int = 3) -> float:
    """Host seconds a substituted call pays before the candidate's own work, on this machine:
    `torch.neg` of one element through the same override every candidate runs in (the aten
    entry, the Python kernel, binding, planning, counting), with a candidate that does nothing.
    Best of `repeats` rounds of `calls`.

    NB: a lower bound for a real candidate: its adapter's input checks and routes add a few us."""
    x = torch.ones(1, device=device)
    op = torch.ops.aten.neg.default
    adapter = AtenAdapter(op=op, prepare=aten_convention(op._schema), profile_names=())
    with override_aten(adapter, lambda t: t, x.device.type, CallLog("dispatch cost"), False,
                       lambda dtype: (0.0, 0.0)):
        through = _best_per_call_s(lambda: torch.neg(x), calls, repeats)
    return max(0.0, through - _best_per_call_s(lambda: None, calls, repeats))


def _best_per_call_s(call: Callable[[], Any], calls: int, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        best = min(best, (time.perf_counter() - t0) / calls)
    return best
