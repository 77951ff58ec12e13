"""Walk outputs of any structure: tensor, tuple, list, dict, namedtuple, dataclass."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch


def tensor_leaves(obj: Any, path: str = "output") -> list[tuple[str, torch.Tensor]]:
    """Every tensor in `obj` with a readable path (`output[1]['logits']`), in a stable order."""
    if isinstance(obj, torch.Tensor):
        return [(path, obj)]
    if isinstance(obj, dict):
        return [leaf for k, v in obj.items() for leaf in tensor_leaves(v, f"{path}[{k!r}]")]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [leaf for f in dataclasses.fields(obj)
                for leaf in tensor_leaves(getattr(obj, f.name), f"{path}.{f.name}")]
    if isinstance(obj, (list, tuple)):
        return [leaf for i, v in enumerate(obj) for leaf in tensor_leaves(v, f"{path}[{i}]")]
    return []


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, dict):
        return type(obj)((k, map_tensors(v, fn)) for k, v in obj.items())
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.replace(obj, **{f.name: map_tensors(getattr(obj, f.name), fn)
                                           for f in dataclasses.fields(obj) if f.init})
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
        return type(obj)(*(map_tensors(v, fn) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_tensors(v, fn) for v in obj)
    return obj
