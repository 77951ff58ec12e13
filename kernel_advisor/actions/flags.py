"""Backend flags set for the duration of a step and restored after it."""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch


@contextlib.contextmanager
def backend_flags(assign: dict[str, object]) -> Iterator[None]:
    """Set attributes like 'cudnn.benchmark' under torch.backends; restore them on exit."""
    saved = {path: current(path) for path in assign}
    try:
        for path, value in assign.items():
            _set(path, value)
        yield
    finally:
        for path, value in saved.items():
            _set(path, value)


def flags_context(assign: dict[str, object]) -> Callable[[], contextlib.AbstractContextManager]:
    return lambda: backend_flags(assign)


def _owner(path: str):
    *parents, attr = path.split(".")
    obj = torch.backends
    for p in parents:
        obj = getattr(obj, p)
    return obj, attr


def current(path: str) -> object:
    obj, attr = _owner(path)
    return getattr(obj, attr)


def _set(path: str, value: object) -> None:
    obj, attr = _owner(path)
    setattr(obj, attr, value)
