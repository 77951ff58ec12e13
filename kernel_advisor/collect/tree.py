"""Walk outputs of any structure: tensor, tuple, list, dict, namedtuple, dataclass.

The structures come from the user's model, so the walk is bounded: a container nested more
than MAX_DEPTH deep, or one that holds itself, is one UserInputError (Python's own recursion
limit would end it as a RecursionError, an internal error). Paths are built only for the
leaves, since a path rebuilt at every level of a deep structure costs quadratic time.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Any, Callable

import torch

from kernel_advisor.errors import UserInputError

MAX_DEPTH = 100  # containers within containers; a real model's inputs or outputs nest a few


def tensor_leaves(obj: Any, path: str = "output") -> list[tuple[str, torch.Tensor]]:
    """Every tensor in `obj` with a readable path (`output[1]['logits']`), in a stable order."""
    leaves: list[tuple[str, torch.Tensor]] = []
    _collect(obj, [path], set(), leaves)
    return leaves


def _collect(obj: Any, keys: list[str], open_ids: set[int], leaves: list) -> None:
    if isinstance(obj, torch.Tensor):
        leaves.append(("".join(keys), obj))
        return
    children = _children(obj)
    if children is None:
        return
    with _entered(obj, keys, open_ids):
        for key, child in children:
            keys.append(key)
            _collect(child, keys, open_ids, leaves)
            keys.pop()


def _children(obj: Any) -> list[tuple[str, Any]] | None:
    if isinstance(obj, dict):
        return [(f"[{k!r}]", v) for k, v in obj.items()]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [(f".{f.name}", getattr(obj, f.name)) for f in dataclasses.fields(obj)]
    if isinstance(obj, (list, tuple)):
        return [(f"[{i}]", v) for i, v in enumerate(obj)]
    return None


class _entered:
    """Marks `obj` open while its children are walked: met again inside itself, it is a cycle."""

    def __init__(self, obj: Any, keys: list[str], open_ids: set[int]) -> None:
        self.id, self.open_ids = id(obj), open_ids
        depth = len(keys)  # the root's name plus one key per level
        if self.id in open_ids:
            raise UserInputError(f"{_shown(keys)} holds itself (a container that contains itself, a cycle)",
                                 "return inputs and outputs without reference cycles: lists, tuples and dicts "
                                 "of tensors")
        if depth > MAX_DEPTH:
            raise UserInputError(f"{_shown(keys)} is nested more than {MAX_DEPTH} containers deep",
                                 "return flatter inputs and outputs: lists, tuples and dicts of tensors")

    def __enter__(self) -> None:
        self.open_ids.add(self.id)

    def __exit__(self, *exc) -> None:
        self.open_ids.discard(self.id)


def _shown(keys: list[str]) -> str:
    """The path of a container, its middle elided when it is long (a deep structure)."""
    if len(keys) <= 8:
        return "".join(keys)
    return "".join(keys[:4]) + "…" + "".join(keys[-3:])


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor], path: str = "inputs") -> Any:
    """`obj` rebuilt with `fn` applied to every tensor (bounded as tensor_leaves is)."""
    return _mapped(obj, fn, [path], set())


def _mapped(obj: Any, fn: Callable, keys: list[str], open_ids: set[int]) -> Any:
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if _children(obj) is None:
        return obj
    with _entered(obj, keys, open_ids):
        return _rebuilt(obj, lambda key, v: _mapped_child(v, fn, keys, key, open_ids), keys)


def _mapped_child(value: Any, fn: Callable, keys: list[str], key: str, open_ids: set[int]) -> Any:
    keys.append(key)
    try:
        return _mapped(value, fn, keys, open_ids)
    finally:
        keys.pop()


def _rebuilt(obj: Any, child: Callable[[str, Any], Any], keys: list[str]) -> Any:
    try:
        if isinstance(obj, dict):
            return _rebuilt_dict(obj, {k: child(f"[{k!r}]", v) for k, v in obj.items()})
        if dataclasses.is_dataclass(obj):
            return dataclasses.replace(obj, **{f.name: child(f".{f.name}", getattr(obj, f.name))
                                               for f in dataclasses.fields(obj) if f.init})
        items = [child(f"[{i}]", v) for i, v in enumerate(obj)]
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
            return type(obj)(*items)
        return type(obj)(items)
    except UserInputError:
        raise
    except Exception as e:  # noqa: BLE001 - a container class whose constructor takes other arguments
        raise UserInputError(f"{_shown(keys)} is a {type(obj).__name__} the advisor cannot rebuild with its "
                             f"tensors moved ({type(e).__name__} from its constructor)",
                             "use plain lists, tuples, dicts, namedtuples or dataclasses for the inputs") from e


def _rebuilt_dict(obj: dict, values: dict) -> dict:
    """A dict of the same class: a copy, then its values replaced, so a defaultdict keeps its
    default_factory and an OrderedDict its order (their constructors take other arguments)."""
    if type(obj) is dict:
        return values
    out = copy.copy(obj)
    for k, v in values.items():
        out[k] = v
    return out
