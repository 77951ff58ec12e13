"""The one correctness gate's driver, for `try-kernel` and `recommend --measure` alike.

A step's output leaves and parameter gradients are captured (`capture_step`); fresh input
draws with eager's and the reference's captures are made once and shared (`GateDraws`); each
variant's capture on a draw is held against them (`gate_draw`) into its `GateRecord`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.nn as nn

from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.runner import make_step
from kernel_advisor.collect.tree import tensor_leaves
from kernel_advisor.errors import exception_text
from kernel_advisor.trykernel.calls import CallLog
from kernel_advisor.trykernel.gate import LeafComparison, compare_leaf, finite_problem

MAX_REASON_CHARS = 300


@dataclass(frozen=True)
class Captured:
    leaves: tuple[tuple[str, torch.Tensor], ...]  # (path, tensor): outputs, then gradients
    # A reference run on a sample of the batch (trykernel/reference.py): the items its
    # leaves hold along dim 0, and the batch size they were taken from. None: every item.
    batch_index: tuple[int, ...] | None = None
    batch_size: int = 0


def capture_step(loaded: LoadedModel, model: Any, params_of: Any, inputs: list, mode: str) -> Captured:
    """One step of `model` on `inputs`; gradients are read from `params_of`'s parameters.

    Everything is cloned at once: CUDA-graph variants overwrite their outputs on the next run.
    """
    step = make_step(dataclasses.replace(loaded, model=model, inputs=inputs), mode, optimizer=False)
    out = step()
    leaves = [(path, t.detach().clone()) for path, t in tensor_leaves(out)]
    if mode == "train" and isinstance(params_of, nn.Module):
        leaves += [(f"grad[{name}]", p.grad.detach().clone())
                   for name, p in params_of.named_parameters() if p.grad is not None]
    return Captured(tuple(leaves))


def compare_captures(got: Captured, base: Captured, ref: Captured | None, tolerance) -> list[LeafComparison]:
    """Every baseline leaf against the variant's leaf of the same path (and the reference's)."""
    got_by, ref_by = dict(got.leaves), dict(ref.leaves) if ref is not None else {}
    if ref is not None and ref.batch_index is not None:
        return [_compare_sampled(path, got_by.get(path), b, ref_by.get(path), ref, tolerance(b.dtype))
                for path, b in base.leaves]
    return [compare_leaf(path, got_by.get(path), b, ref_by.get(path), tolerance(b.dtype))
            for path, b in base.leaves]


def _compare_sampled(path: str, got: torch.Tensor | None, base: torch.Tensor, ref_leaf: torch.Tensor | None,
                     ref: Captured, tolerance) -> LeafComparison:
    """Variant and eager sliced to the reference's batch items; the other items still must not
    turn NaN or constant where eager is not. A leaf without a batch dim has no sampled
    reference (a scalar loss, a gradient): it is held against eager only."""
    n = len(ref.batch_index)
    batched = base.ndim >= 1 and base.shape[0] == ref.batch_size
    if (got is None or ref_leaf is None or not batched or got.shape != base.shape
            or tuple(ref_leaf.shape) != (n, *base.shape[1:])):
        return compare_leaf(path, got, base, None, tolerance)
    rows = torch.tensor(ref.batch_index)
    c = compare_leaf(path, got.index_select(0, rows.to(got.device)), base.index_select(0, rows.to(base.device)),
                     ref_leaf, tolerance)
    problem = c.problem or finite_problem(got, base)
    return dataclasses.replace(c, ok=not problem, problem=problem)


@dataclass
class GateRecord:
    """What the gate saw for one variant over every draw."""

    comparisons: list[LeafComparison] = field(default_factory=list)
    error: str = ""  # the variant raised: its first line
    draws: int = 0
    tolerance: str = ""  # a tolerance other than the variant's or the default, and why ("" for none)
    logs: dict[str, CallLog] = field(default_factory=dict)  # per substituted kernel: its calls
    compile_s: float | None = None  # a compiled variant's first (compiling) call

    @property
    def problem(self) -> str:
        bad = next((c for c in self.comparisons if not c.ok), None)
        return self.error or (f"{bad.path}: {bad.problem}" if bad else "")

    def worst(self) -> dict | None:
        """The largest errors seen, for people: relative to eager and to the reference."""
        if not self.comparisons:
            return None
        worst = {"draws": self.draws, "leaves": len(self.comparisons) // max(self.draws, 1),
                 "rel_err": _max(c.rel_err for c in self.comparisons),
                 "ref_rel_err": _max(c.ref_rel_err for c in self.comparisons),
                 "baseline_ref_rel_err": _max(c.baseline_ref_rel_err for c in self.comparisons)}
        return {**worst, "tolerance": self.tolerance} if self.tolerance else worst


class GateDraws:
    """The gate's fresh input draws, with eager's and the reference's captures on each: made once,
    on first use, and shared by every variant gated after."""

    def __init__(self, loaded: LoadedModel, mode: str, reference, count: int, seed: int) -> None:
        self.loaded, self.mode, self.reference, self.count, self.seed = loaded, mode, reference, count, seed
        self._made: list[tuple] = []

    def __getitem__(self, d: int) -> tuple:
        while len(self._made) <= d:
            loaded, mode = self.loaded, self.mode
            inputs = loaded.make_inputs(self.seed + 1 + len(self._made))
            base = capture_step(loaded, loaded.model, loaded.model, inputs, mode)
            self._made.append((inputs, base, self.reference.capture(loaded, inputs, mode)))
        return self._made[d]


Tolerance = Callable[[torch.dtype], tuple[float, float]]


def gate_draw(record: GateRecord, run: Callable[[], tuple[Captured, Tolerance]], base: Captured,
              ref: Captured | None, failure: Callable[[Exception], str] = None) -> None:
    """One draw of one variant: `run` makes its capture and says the tolerance it is held to.

    A variant that raises is recorded with `failure(e)` (default: the exception's first line) and
    not gated again; `failure` may re-raise where the error is not the variant's to own.
    """
    if record.error:
        return
    try:
        got, tolerance = run()
    except Exception as e:  # noqa: BLE001 - a variant the model rejects is a result, not a crash
        record.error = (failure or first_line)(e)
        return
    record.comparisons.extend(compare_captures(got, base, ref, tolerance))
    record.draws += 1


def first_line(e: BaseException) -> str:
    return exception_text(e)[:MAX_REASON_CHARS]


def _max(values) -> float | None:
    finite = [v for v in values if v == v]
    return max(finite) if finite else None
