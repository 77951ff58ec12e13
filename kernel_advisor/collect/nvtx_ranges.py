"""NVTX ranges for the advisor's own phases, so an Nsight Systems capture reads well.

Uses the `nvtx` package when installed, else torch.cuda.nvtx on a CUDA machine, else nothing.
The functions are bound at import, before nvtx_mirror patches the module attributes, so the
advisor's own ranges are never mirrored into the profiler as user regions.
"""
from __future__ import annotations

import contextlib
import functools
import threading

import torch
from torch.autograd.profiler import record_function

try:
    from nvtx import pop_range as _pop
    from nvtx import push_range as _push
except ImportError:  # the package is a dependency, but a bare GPU image may lack it
    _push = _pop = None

_torch_push, _torch_pop = torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop


@contextlib.contextmanager
def nvtx_range(name: str):
    if _push is not None:
        _push(name, domain="kernel_advisor")
        try:
            yield
        finally:
            _pop(domain="kernel_advisor")
    elif torch.cuda.is_available():
        _torch_push(name)
        try:
            yield
        finally:
            _torch_pop()
    else:
        yield


# ------------------------------------------------------------
# Mirror the model's own NVTX ranges into torch.profiler, so they become regions.
#
# torch.profiler does not record NVTX ranges. While `mirror_user_nvtx()` is active, every
# range the model opens with `torch.cuda.nvtx` (range_push/range_pop/range) or the `nvtx`
# package (annotate as context manager or decorator, push_range/pop_range) also opens a
# `record_function` of the same name; the trace then carries it as a user annotation and
# attribution fills each op's `region`. The real NVTX range is still pushed where NVTX works,
# so Nsight Systems sees the same names. On a machine without CUDA, torch.cuda.nvtx calls
# (which would raise there) only open the profiler range.

try:
    import nvtx as _nvtx
except ImportError:
    _nvtx = None

_local = threading.local()


def _stack() -> list:
    if not hasattr(_local, "ranges"):
        _local.ranges = []
    return _local.ranges


def _open(name) -> None:
    rf = record_function(str(name))
    rf.__enter__()
    _stack().append(rf)


def _close() -> None:
    if _stack():
        _stack().pop().__exit__(None, None, None)


_depth = [0]


@contextlib.contextmanager
def mirror_user_nvtx():
    """Re-entrant: wrap model loading too, so `@nvtx.annotate` decorators applied at import
    time are mirrored (the decorated function keeps its profiler range afterwards)."""
    if _depth[0]:
        yield
        return
    _depth[0] += 1
    with contextlib.ExitStack() as stack:
        stack.callback(_depth.__setitem__, 0, 0)
        _patch_torch_nvtx(stack)
        if _nvtx is not None:
            _patch_nvtx_package(stack)
        try:
            yield
        finally:
            while _stack():  # ranges the model left open are closed with the step
                _close()


def _patch(stack: contextlib.ExitStack, owner, name: str, new) -> None:
    old = getattr(owner, name)
    setattr(owner, name, new)
    stack.callback(setattr, owner, name, old)


def _patch_torch_nvtx(stack: contextlib.ExitStack) -> None:
    tn = torch.cuda.nvtx
    push, pop = tn.range_push, tn.range_pop
    real = torch.cuda.is_available()

    def range_push(msg):
        _open(msg)
        return push(msg) if real else 0

    def range_pop():
        _close()
        return pop() if real else 0

    _patch(stack, tn, "range_push", range_push)
    _patch(stack, tn, "range_pop", range_pop)


def _patch_nvtx_package(stack: contextlib.ExitStack) -> None:
    ann = _nvtx.annotate
    enter, exit_, call = ann.__enter__, ann.__exit__, ann.__call__
    push, pop = _nvtx.push_range, _nvtx.pop_range

    def ann_enter(self):
        _open(self.init_args[0] or "nvtx")
        return enter(self)

    def ann_exit(self, *exc):
        try:
            return exit_(self, *exc)
        finally:
            _close()

    def ann_call(self, func):
        inner = call(self, func)
        name = self.init_args[0] or func.__name__

        @functools.wraps(func)
        def mirrored(*args, **kwargs):
            with record_function(name):
                return inner(*args, **kwargs)

        return mirrored

    def push_range(message=None, *args, **kwargs):
        _open(message or "nvtx")
        return push(message, *args, **kwargs)

    def pop_range(*args, **kwargs):
        try:
            return pop(*args, **kwargs)
        finally:
            _close()

    for name, new in (("__enter__", ann_enter), ("__exit__", ann_exit), ("__call__", ann_call)):
        _patch(stack, ann, name, new)
    _patch(stack, _nvtx, "push_range", push_range)
    _patch(stack, _nvtx, "pop_range", pop_range)
