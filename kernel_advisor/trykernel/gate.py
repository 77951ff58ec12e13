"""The correctness gate: is a variant's output the baseline's output, within tolerance?

Two levels. Per call (`check_call_output`): the candidate's result against the original
kernel on the same arguments, with the kernel's own per-dtype tolerance. Per model
(`compare_leaf`): every output leaf (and, in train mode, every parameter gradient) of the
variant against the eager baseline and, where the model runs in float64, both against the
float64 result. Errors are in float64 over the elements finite in both tensors.
"""
from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass
from typing import Any, Iterator

import torch

# NB: as torch._dynamo.utils.same: a variant may be at most this many times further from
# the float64 result than eager PyTorch at the same dtype (plus the kernel's rtol).
REFERENCE_ERROR_MULTIPLIER = 2.0
CHUNK_ELEMENTS = 1 << 24  # 128 MiB per float64 operand


@contextlib.contextmanager
def uninitialized_memory_poisoned() -> Iterator[None]:
    """New uninitialized tensors (torch.empty*) hold NaN (integers: their maximum) inside.

    A kernel that never writes its torch.empty output could otherwise pass: the caching
    allocator may hand it the very buffer the original op's equal result was just freed from.
    torch fills uninitialized memory only with deterministic algorithms on; warn_only keeps
    the ops without a deterministic variant running, and their warnings are not the user's.
    """
    enabled = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*deterministic.*")
            yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = fill
        torch.use_deterministic_algorithms(enabled, warn_only=warn_only)


@dataclass(frozen=True)
class LeafComparison:
    path: str
    dtype: str
    max_abs_err: float  # max |variant - baseline|
    rel_err: float  # ||variant - baseline|| / ||baseline||
    ref_rel_err: float  # ||variant - fp64|| / ||fp64||, NaN without a float64 result
    baseline_ref_rel_err: float  # ||baseline - fp64|| / ||fp64||, NaN without one
    limit: float  # the bound the deciding error was held to
    ok: bool
    problem: str  # "" when ok


def check_call_output(got: Any, expected: Any, tolerance: tuple[float, float]) -> tuple[str, bool]:
    """(problem, fatal) for one call's result; ("", False) when it matches.

    Fatal problems (type, shape, dtype) would break the model downstream; the rest are
    recorded and the run goes on so the model-level errors are reported too.
    """
    got_t, exp_t = _flatten(got), _flatten(expected)
    if got_t is None:
        return f"returned {type(got).__name__}, expected {_describe(expected)}", True
    if isinstance(expected, torch.Tensor) and not isinstance(got, torch.Tensor):
        # `return (y,)` for an op that returns one tensor: the dispatcher would fail to cast it
        # in the model's forward, as if the model were wrong
        return (f"returned a {type(got).__name__} of {len(got_t)} tensor{'s' if len(got_t) != 1 else ''}, "
                f"expected {_describe(expected)} (not in a {type(got).__name__})"), True
    if len(got_t) != len(exp_t):
        return f"returned {len(got_t)} tensors, expected {len(exp_t)}", True
    for i, (g, e) in enumerate(zip(got_t, exp_t)):
        which = f"output {i}: " if len(exp_t) > 1 else ""
        if tuple(g.shape) != tuple(e.shape):
            return f"{which}shape {list(g.shape)}, expected {list(e.shape)}", True
        if g.dtype != e.dtype:
            return f"{which}dtype {_name(g.dtype)}, expected {_name(e.dtype)}", True
        if g.device != e.device:
            return f"{which}on {g.device}, expected {e.device}", True
        problem = _value_problem(g, e, tolerance)
        if problem:
            return which + problem, False
    return "", False


def compare_leaf(path: str, got: torch.Tensor | None, base: torch.Tensor,
                 ref: torch.Tensor | None, tolerance: tuple[float, float]) -> LeafComparison:
    """One output leaf or gradient of a variant against the baseline (and float64 result)."""
    dtype = _name(base.dtype)
    nan = float("nan")
    if got is None:
        return LeafComparison(path, dtype, nan, nan, nan, nan, nan, False, "missing (no tensor here)")
    if tuple(got.shape) != tuple(base.shape) or got.dtype != base.dtype:
        problem = f"{list(got.shape)} {_name(got.dtype)}, baseline {list(base.shape)} {dtype}"
        return LeafComparison(path, dtype, nan, nan, nan, nan, nan, False, problem)
    if not base.is_floating_point():
        same = bool(torch.equal(got.cpu(), base.cpu()))
        return LeafComparison(path, dtype, 0.0 if same else nan, 0.0 if same else nan, nan, nan, 0.0,
                              same, "" if same else "integer/bool output differs from the baseline")
    problem = _value_problem(got, base, None)
    max_abs, rel = _errors(got, base)
    ref_err, base_ref_err = (_errors(got, ref)[1], _errors(base, ref)[1]) if ref is not None else (nan, nan)
    rtol, atol = tolerance
    limit, err = _limit_and_error(rel, max_abs, ref_err, base_ref_err, _norm(base), rtol, atol)
    if not problem and not err <= limit:
        against = "float64 result" if not math.isnan(ref_err) else "baseline"
        problem = f"relative error {err:.3g} vs the {against} exceeds {limit:.3g}"
    return LeafComparison(path, dtype, max_abs, rel, ref_err, base_ref_err, limit, not problem, problem)


def finite_problem(got: torch.Tensor, base: torch.Tensor) -> str:
    """The checks that need no tolerance: NaN/Inf where eager is finite, a constant where it varies."""
    return _value_problem(got, base, None)


def _limit_and_error(rel: float, max_abs: float, ref_err: float, base_ref_err: float,
                     base_norm: float, rtol: float, atol: float) -> tuple[float, float]:
    if base_norm == 0.0:
        return atol, max_abs  # a relative error of an all-zero baseline means nothing
    if not math.isnan(ref_err) and not math.isnan(base_ref_err):
        return REFERENCE_ERROR_MULTIPLIER * base_ref_err + rtol, ref_err
    return rtol, rel


def _value_problem(got: torch.Tensor, base: torch.Tensor, tolerance: tuple[float, float] | None) -> str:
    if not got.is_floating_point():
        return "" if torch.equal(got, base) else "values differ"
    n_bad = sum(int((~torch.isfinite(g) & torch.isfinite(b)).sum()) for g, b in _chunks(got, base))
    if n_bad:
        return f"{n_bad} NaN/Inf of {got.numel()} where the baseline is finite"
    if _is_constant(got) and not _is_constant(base):
        value = float(got[(0,) * got.ndim]) if got.numel() else float("nan")
        return f"constant output (every element {value:.4g}) where the baseline varies — was it written?"
    if tolerance is None:
        return ""
    max_abs, rel = _errors(got, base)
    rtol, atol = tolerance
    base_norm = _norm(base)
    limit, err = (atol, max_abs) if base_norm == 0.0 else (rtol, rel)
    return "" if err <= limit else f"relative error {err:.3g} exceeds {limit:.3g} (max abs {max_abs:.3g})"


def _chunks(*ts: torch.Tensor):
    """Matching flat slices of same-sized tensors in float64, on the last one's device.

    NB: a chunk at a time, so that checking a 2-billion-element output never needs float64
    copies of it (and boolean-mask indices) that would take tens of GiB at once.
    """
    flats = [t.detach().reshape(-1) for t in ts]
    dev = flats[-1].device
    for start in range(0, flats[-1].numel(), CHUNK_ELEMENTS):
        yield [f[start:start + CHUNK_ELEMENTS].to(dev, torch.float64) for f in flats]


def _is_constant(t: torch.Tensor) -> bool:
    lo, hi, n = math.inf, -math.inf, 0
    for (c,) in _chunks(t):
        finite = torch.isfinite(c)
        n += int(finite.sum())
        lo = min(lo, float(torch.where(finite, c, math.inf).min()))
        hi = max(hi, float(torch.where(finite, c, -math.inf).max()))
        if n >= 2 and lo < hi:
            return False
    return n >= 2 and lo == hi


def _errors(a: torch.Tensor, b: torch.Tensor) -> tuple[float, float]:
    """(max |a-b|, ||a-b|| / ||b||) in float64 over elements finite in both; inf if one side is not."""
    max_abs, num2, den2, seen = 0.0, 0.0, 0.0, 0
    for a64, b64 in _chunks(a, b):
        fa, fb = torch.isfinite(a64), torch.isfinite(b64)
        if bool((fa != fb).any()):
            return float("inf"), float("inf")  # NaN/Inf on one side only: no finite distance
        diff = torch.where(fb, a64 - b64, 0.0)
        seen += int(fb.sum())
        max_abs = max(max_abs, float(diff.abs().max()))
        num2 += float(diff.square().sum())
        den2 += float(torch.where(fb, b64, 0.0).square().sum())
    if seen == 0:
        return 0.0, 0.0
    num, denom = math.sqrt(num2), math.sqrt(den2)
    rel = num / denom if denom > 0 else (0.0 if num == 0 else float("inf"))
    return max_abs, rel


def _norm(t: torch.Tensor) -> float:
    return math.sqrt(sum(float(torch.where(torch.isfinite(c), c, 0.0).square().sum()) for (c,) in _chunks(t)))


def _flatten(obj: Any) -> list[torch.Tensor] | None:
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in obj):
        return list(obj)
    return None


def _describe(obj: Any) -> str:
    ts = _flatten(obj) or []
    return " and ".join(f"a {_name(t.dtype)} tensor of shape {list(t.shape)}" for t in ts) or "tensors"


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")
