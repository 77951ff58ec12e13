"""A model that lives in memory (a notebook's nn.Module), loaded as a model file would be."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from kernel_advisor.collect.loader import (AUTOCAST_DTYPES, DTYPES, LoadedModel, _check_autocast,
                                          check_no_meta_inputs, check_no_meta_model)
from kernel_advisor.collect.options import resolve_device
from kernel_advisor.collect.user_code import map_tensors, tensor_leaves
from kernel_advisor.errors import UserInputError

Inputs = Sequence[Any] | Callable[[], Sequence[Any]]


def loaded_from_module(model: Any, inputs: Inputs, *, device: str = "auto", dtype: str = "keep",
                       loss_fn: Callable | None = None, seed: int = 0, autocast: str | None = None) -> LoadedModel:
    """`inputs` is a list of tensors, or a zero-argument function drawing a fresh list.

    With a list, every input draw of the correctness gate is that same list (there is no
    way to draw another); with a function, each draw calls it under its own seed.
    `autocast` ("bfloat16", "float16") runs steps under torch.autocast, as a model file's.
    """
    if dtype not in DTYPES:
        raise UserInputError(f"unknown dtype '{dtype}'", f"use one of {', '.join(DTYPES)}")
    _check_autocast(autocast, dtype)  # the model file's rule: autocast needs float32 weights
    if not callable(model):
        raise UserInputError(f"the model is a {type(model).__name__}, not callable", "pass an nn.Module")
    dev, cast = resolve_device(device), DTYPES[dtype]
    check_no_meta_model(model, type(model).__name__)
    draw = _drawer(inputs)

    def place(values: list) -> list:
        return map_tensors(values, lambda t: t.to(dev, cast) if cast is not None and t.is_floating_point()
                           else t.to(dev))

    def make_inputs(draw_seed: int) -> list:
        torch.manual_seed(draw_seed)
        return place(draw())

    torch.manual_seed(seed)
    first = place(draw())
    if isinstance(model, torch.nn.Module):
        model = model.to(dev) if cast is None else model.to(dev, cast)
    name = type(model).__name__
    return LoadedModel(path=Path(f"<in-memory {name}>"), sha256="", entry=None, module=None, model=model,
                       inputs=first, loss_fn=loss_fn, device=dev, dtype=cast, make_inputs=make_inputs,
                       autocast=AUTOCAST_DTYPES[autocast] if autocast else None)


def _drawer(inputs: Inputs) -> Callable[[], list]:
    if callable(inputs):
        return lambda: _checked(inputs())
    fixed = _checked(inputs)
    return lambda: map_tensors(fixed, lambda t: t.clone())


def _checked(values: Any) -> list:
    if isinstance(values, torch.Tensor):
        values = [values]
    if not isinstance(values, (list, tuple)) or not tensor_leaves(list(values)):
        raise UserInputError("inputs must be a list of tensors (or a function returning one)",
                             "pass inputs=[torch.randn(...)]")
    check_no_meta_inputs(values, "profile()", "inputs")
    return list(values)
