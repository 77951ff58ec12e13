"""Run one step and keep what the gate compares: output leaves and parameter gradients."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.runner import make_step
from kernel_advisor.collect.tree import tensor_leaves
from kernel_advisor.trykernel.gate import LeafComparison, compare_leaf, finite_problem


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
