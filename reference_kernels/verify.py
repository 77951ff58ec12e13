"""Correctness harness for reference kernels (Triton and CUDA), generic over KernelSpec.

For every (shape, dtype, variant) of the kernel's family:
- forward: fresh random inputs, the kernel's outputs against `spec.reference` run on float64
  copies; every torch.empty* the kernel's Python code calls returns NaN-filled memory, so an
  element the kernel never writes stays NaN, and NaN never passes;
- backward (has_backward): gradients for a random upstream gradient against the float64
  reference's gradients, allocations poisoned the same way;
- deterministic: a second run from the same inputs must be bitwise identical;
then, per variant, torch.autograd.gradcheck in float64 on a small shape.

Pass rule per output (rtol, atol = spec.tolerance(dtype)):
  ||out - ref|| / ||ref|| <= rtol                 (the headline number; when ||ref|| == 0,
                                                   max|out - ref| <= atol instead)
    or ||out - ref|| <= 2 * ||round_to_dtype(ref) - ref||   (the dtype cannot do better:
                                                   fp16 gradients in the subnormal range)
  |out - ref| <= atol + rtol * (|ref| + max|ref|) (no element off by more than rtol of
                                                   the tensor's scale)
No absolute floor in the norm rule: gradients are often tiny (cross-entropy over 128K
classes: ~1e-10 per element) and any fixed atol*sqrt(n) would swallow a 1% error there.
The element bound carries max|ref| because gradients that come out of a reduction (dx of a
norm, dw summed over rows) carry the rounding of the terms summed, not of the result: eager
PyTorch in bf16 misses a plain |ref|-relative bound on such elements by 3-5x.
Equal infinities count as exact. The families (which inputs a kernel takes) are picked by the
kernel id after its backend prefix: "triton.softmax" and "cuda.softmax" share "softmax"
(reference_kernels/triton/cases.py, which is backend-neutral).
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import warnings
import zlib
from dataclasses import asdict, dataclass

import torch

from reference_kernels.errors import KernelUnavailableError
from reference_kernels.registry import KernelSpec
from reference_kernels.triton.cases import FAMILIES, Call, family_name

GRADCHECK_DTYPE = torch.float64
# A kernel may be this many times further from float64 than rounding the exact result to its
# output dtype is (only ever looser than rtol where that rounding itself exceeds rtol).
STORAGE_ROUNDING_MULTIPLIER = 2.0


@dataclass(frozen=True)
class CaseResult:
    shape: tuple[int, ...]
    dtype: str
    max_abs_err: float  # NaN when the check measures no error (gradcheck, exceptions)
    rel_err_norm: float  # ||out - ref|| / ||ref||, worst over outputs; NaN: reference all 0
    passed: bool
    reason: str = ""  # why it failed; "" when it passed
    check: str = "forward"  # forward | backward | deterministic | gradcheck
    variant: str = ""


@dataclass(frozen=True)
class VerifyResult:
    kernel_id: str
    device: str
    passed: bool
    cases: tuple[CaseResult, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = asdict(self)
        for case in d["cases"]:
            for key in ("max_abs_err", "rel_err_norm"):
                if not math.isfinite(case[key]):
                    case[key] = None if math.isnan(case[key]) else str(case[key])
        return d


def prepare_backend(spec: KernelSpec, device: str) -> None:
    """Triton on CPU needs TRITON_INTERPRET=1 before triton is imported: set it or refuse."""
    if spec.capability.backend != "triton" or device != "cpu":
        return
    common = sys.modules.get("reference_kernels.triton._common")
    if common is not None and not common.INTERPRETED:
        _refuse_interpreter()
    if os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on"):
        return
    if "triton" in sys.modules:
        _refuse_interpreter()
    os.environ["TRITON_INTERPRET"] = "1"


def _refuse_interpreter() -> None:
    raise KernelUnavailableError(
        "triton was imported in this process without TRITON_INTERPRET=1, so Triton kernels "
        "cannot run on the CPU here",
        "rerun with TRITON_INTERPRET=1 in the environment (e.g. TRITON_INTERPRET=1 advisor "
        "kernels verify --device cpu), or use --device cuda on a GPU machine")


def verify_kernel(spec: KernelSpec, device: str = "cuda", case_list: str | None = None,
                  seed: int = 0) -> VerifyResult:
    """Run every check of `spec` on `device`; `case_list` ("cpu"/"cuda") defaults to the device's.

    Raises KernelUnavailableError when the kernel cannot run here at all.
    """
    reason = spec.reason_if_unsatisfied(device)
    if reason:
        raise KernelUnavailableError(f"{spec.id} cannot run on {device}: {reason}",
                                         "run on a machine that has it, or pick another kernel")
    prepare_backend(spec, device)
    name = family_name(spec.id)
    family = FAMILIES.get(name)
    if family is None:
        case = _failed(CaseResult((), "", math.nan, math.nan, False), check="setup",
                       reason=f"no verification family '{name}'; name the kernel "
                              f"<backend>.<family> with a family of: {', '.join(sorted(FAMILIES))}")
        return VerifyResult(spec.id, device, False, (case,))
    fn, ref = spec.load(), spec.load_reference()
    shapes = family.shapes[case_list or torch.device(device).type]
    notes: list[str] = []
    with warnings.catch_warnings():
        # The CPU interpreter computes masked-off lanes too; numpy warns about their inf/NaN.
        warnings.filterwarnings("ignore", category=RuntimeWarning,
                                module=r"triton\.runtime\.interpreter")
        cases = [case for shape in shapes for dtype_name in spec.dtypes
                 for variant in family.variants
                 for case in _check_case(spec, fn, ref, family, device, shape, dtype_name,
                                         variant, seed)]
        if spec.has_backward:
            cases.extend(_gradchecks(spec, fn, family, device, seed, notes))
    passed = bool(cases) and all(c.passed for c in cases)
    return VerifyResult(spec.id, device, passed, tuple(cases), tuple(notes))


def _check_case(spec, fn, ref, family, device, shape, dtype_name: str, variant: str, seed: int):
    # A seed per case: the same inputs on every run and machine, different across cases.
    gen = torch.Generator().manual_seed(seed + zlib.crc32(
        repr((family_name(spec.id), shape, dtype_name, variant)).encode()))
    dtype = getattr(torch, dtype_name)
    call = family.make(shape, dtype, variant, gen)
    return _check_call(spec, fn, ref, call, device, shape, dtype, variant, gen)


# ---- one (shape, dtype, variant): forward, backward, determinism -------------------------

def _check_call(spec, fn, ref, call: Call, device, shape, dtype, variant, gen):
    base = CaseResult(tuple(shape), str(dtype).replace("torch.", ""), math.nan, math.nan, False,
                      variant=variant)
    tol = spec.tolerance(dtype)
    try:
        outs, grads, upstream = _run(fn, call, device, spec.has_backward, gen, None)
    except _BackwardFailed as e:
        return [_failed(base, "backward", _describe(e.__cause__))]
    except Exception as e:  # noqa: BLE001 - a kernel that raises on a valid input fails
        return [_failed(base, "forward", _describe(e))]
    ref_outs, ref_grads = _run_reference(ref, call, device, spec.has_backward, upstream)
    results = [_compared(base, "forward", outs, ref_outs, tol)]
    if spec.has_backward:
        results.append(_compared(base, "backward", grads, ref_grads, tol))
    try:
        outs2, grads2, _ = _run(fn, call, device, spec.has_backward, gen, upstream)
        results.append(_bitwise(base, outs + grads, outs2 + grads2))
    except Exception as e:  # noqa: BLE001
        results.append(_failed(base, "deterministic", _describe(e)))
    return results


def _run(fn, call: Call, device, backward: bool, gen, upstream):
    """Kernel outputs, input gradients and the upstream gradients used (made when None)."""
    args = _materialise(call, device, dtype=None, requires_grad=backward)
    with _poisoned_allocations():
        outs = _flatten(fn(*args, **call.kwargs))
    if not backward:
        return [o.detach() for o in outs], [], []
    if upstream is None:
        upstream = [_random_like(o, gen) for o in outs]
    leaves = [args[i] for i in call.grad_positions]
    try:
        with _poisoned_allocations():
            grads = torch.autograd.grad(outs, leaves, upstream)
    except Exception as e:  # noqa: BLE001 - reported as a backward failure
        raise _BackwardFailed() from e
    return [o.detach() for o in outs], list(grads), upstream


class _BackwardFailed(Exception):
    """The forward ran; the backward raised (the cause)."""


def _run_reference(ref, call: Call, device, backward: bool, upstream):
    args = _materialise(call, device, dtype=torch.float64, requires_grad=backward)
    outs = _flatten(ref(*args, **call.kwargs))
    if not backward:
        return [o.detach() for o in outs], []
    leaves = [args[i] for i in call.grad_positions]
    grads = torch.autograd.grad(outs, leaves, [u.to(torch.float64) for u in upstream])
    return [o.detach() for o in outs], list(grads)


def _materialise(call: Call, device, dtype, requires_grad: bool) -> list:
    """Fresh leaf copies of the call's tensors on `device` (float ones cast to `dtype`)."""
    args = []
    for i, a in enumerate(call.args):
        if isinstance(a, torch.Tensor):
            a = a.to(device=device, dtype=dtype if dtype and a.is_floating_point() else a.dtype)
            a = a.detach().clone().requires_grad_(requires_grad and i in call.grad_positions)
        args.append(a)
    return args


def _random_like(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(t.shape, generator=gen, dtype=torch.float64).to(t.device, t.dtype)


def _flatten(out) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


@contextlib.contextmanager
def _poisoned_allocations():
    """torch.empty / empty_like / empty_strided / Tensor.new_empty return NaN-filled memory
    (integers: their max, bool: True) while active, so unwritten outputs cannot pass.

    NB: allocations made in C++ (at::empty in an extension) bypass this; such kernels should
    allocate their outputs in Python.
    """
    saved = {name: getattr(torch, name) for name in ("empty", "empty_like", "empty_strided")}
    saved_new_empty = torch.Tensor.new_empty
    try:
        for name, original in saved.items():
            setattr(torch, name, _poisoning(original))
        torch.Tensor.new_empty = _poisoning(saved_new_empty)
        yield
    finally:
        for name, original in saved.items():
            setattr(torch, name, original)
        torch.Tensor.new_empty = saved_new_empty


def _poisoning(allocate):
    @functools.wraps(allocate)
    def poisoned(*args, **kwargs):
        t = allocate(*args, **kwargs)
        with torch.no_grad():
            if t.is_floating_point() or t.is_complex():
                t.fill_(float("nan"))
            elif t.dtype == torch.bool:
                t.fill_(True)
            else:
                t.fill_(torch.iinfo(t.dtype).max)
        return t
    return poisoned


# ---- comparisons --------------------------------------------------------------------------

def _compared(base: CaseResult, check: str, outs, refs, tol) -> CaseResult:
    if len(outs) != len(refs):
        return _failed(base, check, f"{len(outs)} outputs, the reference has {len(refs)}")
    abs_errs, rel_errs, reasons = [], [], []
    for k, (out, ref) in enumerate(zip(outs, refs)):
        abs_err, rel_err, reason = _compare_one(out, ref, tol)
        abs_errs.append(abs_err)
        rel_errs.append(rel_err)
        if reason:
            reasons.append(f"output {k}: {reason}" if len(outs) > 1 else reason)
    return CaseResult(base.shape, base.dtype, _worst(abs_errs), _worst(rel_errs), not reasons,
                      "; ".join(reasons), check, base.variant)


def _worst(errors: list[float]) -> float:
    """The largest error; NaN (not measured) only when no output has a measured one."""
    measured = [e for e in errors if not math.isnan(e)]
    return max(measured) if measured else math.nan


def _compare_one(out: torch.Tensor, ref: torch.Tensor, tol) -> tuple[float, float, str]:
    rtol, atol = tol
    if out.shape != ref.shape:
        return math.inf, math.inf, f"shape {list(out.shape)}, expected {list(ref.shape)}"
    o, r = out.detach().to(torch.float64).cpu(), ref.detach().to(torch.float64).cpu()
    if torch.isnan(r).any():
        return math.nan, math.nan, "the float64 reference produced NaN for this input"
    nan_count = int(torch.isnan(o).sum())
    if nan_count:
        return math.nan, math.nan, f"{nan_count} NaN element(s) (unwritten or invalid)"
    diff = torch.where(o == r, torch.zeros_like(o), o - r)  # equal infinities are exact
    if not torch.isfinite(diff).all():
        return math.inf, math.inf, "infinite where the reference is finite (or the reverse)"
    ref_norm, diff_norm = float(r[torch.isfinite(r)].norm()), float(diff.norm())
    abs_err = float(diff.abs().max()) if diff.numel() else 0.0
    if ref_norm == 0.0:  # e.g. the gradient of a 1-wide layer_norm: no relative error
        reason = "" if abs_err <= atol else f"max abs error {abs_err:.2e} > {atol:.0e} " \
                                             "against an all-zero reference"
        return abs_err, math.nan, reason
    rel_err = diff_norm / ref_norm
    # Storing the exact result in out.dtype already costs this much; fp16 gradients in the
    # subnormal range (mean cross-entropy over many rows: ~1e-6) lose digits to it.
    storage_floor = float((r.to(out.dtype).to(torch.float64) - r).nan_to_num(0.0, 0.0, 0.0).norm())
    if diff_norm > max(rtol * ref_norm, STORAGE_ROUNDING_MULTIPLIER * storage_floor):
        return abs_err, rel_err, f"relative error norm {rel_err:.2e} > {rtol:.0e}"
    magnitude = r.abs().nan_to_num(posinf=0.0, neginf=0.0)
    scale = float(magnitude.max()) if magnitude.numel() else 0.0
    excess = diff.abs() - (atol + rtol * (magnitude + scale))
    if (excess > 0).any():
        i = int(excess.flatten().argmax())
        return abs_err, rel_err, (f"element {list(_unravel(i, o.shape))}: {o.flatten()[i]:.6g}, "
                                  f"expected {r.flatten()[i]:.6g}")
    return abs_err, rel_err, ""


def _unravel(i: int, shape) -> tuple[int, ...]:
    idx = []
    for d in reversed(shape):
        idx.append(i % d)
        i //= d
    return tuple(reversed(idx))


def _bitwise(base: CaseResult, first, second) -> CaseResult:
    worst = 0.0
    for a, b in zip(first, second):
        if not torch.equal(a, b):
            same = (a == b) | (torch.isnan(a) & torch.isnan(b))
            worst = max(worst, float((a.double() - b.double()).abs()[~same].max()))
    ok = worst == 0.0
    return CaseResult(base.shape, base.dtype, worst, 0.0 if ok else math.nan, ok,
                      "" if ok else f"two runs differ by up to {worst:.3g}", "deterministic",
                      base.variant)


def _failed(base: CaseResult, check: str, reason: str) -> CaseResult:
    return CaseResult(base.shape, base.dtype, math.nan, math.nan, False, reason, check,
                      base.variant)


def _describe(e: BaseException) -> str:
    first = (str(e).strip().splitlines() or [""])[0]
    return f"{type(e).__name__}: {first[:300]}"


# ---- gradcheck in float64 -----------------------------------------------------------------

def _gradchecks(spec, fn, family, device, seed, notes: list[str]) -> list[CaseResult]:
    results = []
    shape = family.gradcheck_shape
    for variant in family.gradcheck_variants or family.variants:
        gen = torch.Generator().manual_seed(seed + zlib.crc32(repr((spec.id, variant)).encode()))
        call = family.make(shape, GRADCHECK_DTYPE, variant, gen)
        base = CaseResult(tuple(shape), "float64", math.nan, math.nan, False, check="gradcheck",
                          variant=variant)
        outcome = _gradcheck_one(fn, call, device)
        if outcome == "no-float64":
            notes.append(f"gradcheck skipped: {spec.id} rejects float64 inputs; its gradients "
                         "were compared with the float64 reference's only")
            return []
        results.append(CaseResult(base.shape, base.dtype, math.nan, math.nan, outcome == "",
                                  outcome, "gradcheck", variant))
    return results


def _gradcheck_one(fn, call: Call, device) -> str:
    """"" when gradcheck passes, "no-float64" when the kernel rejects float64, else why not."""
    args = _materialise(call, device, dtype=torch.float64, requires_grad=True)
    leaves = tuple(args[i] for i in call.grad_positions)

    def run(*tensors):
        full = list(args)
        for pos, t in zip(call.grad_positions, tensors):
            full[pos] = t
        return fn(*full, **call.kwargs)

    try:
        run(*leaves)
    except TypeError:
        return "no-float64"
    except Exception as e:  # noqa: BLE001
        return _describe(e)
    try:
        # NB: the full Jacobian: fast mode (random projections) lets a 1%-scaled gradient pass.
        torch.autograd.gradcheck(run, leaves, eps=1e-6, atol=1e-5, rtol=1e-3)
    except Exception as e:  # noqa: BLE001 - GradcheckError or a kernel error: both fail
        return _describe(e)
    return ""
