"""Run one step and keep what the gate compares: output leaves and parameter gradients."""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.runner import make_step
from kernel_advisor.collect.tree import map_tensors, tensor_leaves
from kernel_advisor.trykernel.gate import LeafComparison, compare_leaf


@dataclass(frozen=True)
class Captured:
    leaves: tuple[tuple[str, torch.Tensor], ...]  # (path, tensor): outputs, then gradients


def capture_step(loaded: LoadedModel, model: Any, params_of: Any, inputs: list, mode: str) -> Captured:
    """One step of `model` on `inputs`; gradients are read from `params_of`'s parameters.

    Everything is cloned at once: CUDA-graph variants overwrite their outputs on the next run.
    """
    step = make_step(dataclasses.replace(loaded, model=model, inputs=inputs), mode)
    out = step()
    leaves = [(path, t.detach().clone()) for path, t in tensor_leaves(out)]
    if mode == "train" and isinstance(params_of, nn.Module):
        leaves += [(f"grad[{name}]", p.grad.detach().clone())
                   for name, p in params_of.named_parameters() if p.grad is not None]
    return Captured(tuple(leaves))


def float64_twin(loaded: LoadedModel) -> tuple[nn.Module | None, str]:
    """A float64 copy of the model on the same device, or (None, why not)."""
    model = loaded.model
    if not isinstance(model, nn.Module):
        return None, "the model is a callable, not an nn.Module, so it cannot be copied to float64"
    floats = [p for p in model.parameters() if p.is_floating_point()]
    if floats and all(p.dtype == torch.float64 for p in floats):
        return None, "the model already computes in float64"
    try:
        return copy.deepcopy(model).to(torch.float64), ""
    except torch.OutOfMemoryError:
        return None, "no memory left for a float64 copy of the model"
    except Exception as e:  # noqa: BLE001 - a model that cannot be copied just has no fp64 result
        return None, f"the model could not be copied to float64 ({type(e).__name__}: {e})"


def as_float64(inputs: list) -> list:
    return map_tensors(inputs, lambda t: t.to(torch.float64) if t.is_floating_point() else t)


def compare_captures(got: Captured, base: Captured, ref: Captured | None, tolerance) -> list[LeafComparison]:
    """Every baseline leaf against the variant's leaf of the same path (and the fp64 one)."""
    got_by, ref_by = dict(got.leaves), dict(ref.leaves) if ref is not None else {}
    return [compare_leaf(path, got_by.get(path), b, ref_by.get(path), tolerance(b.dtype))
            for path, b in base.leaves]
