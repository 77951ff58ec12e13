"""NVTX ranges for the advisor's own phases, so an Nsight Systems capture reads well.

Uses the `nvtx` package when installed, else torch.cuda.nvtx on a CUDA machine, else nothing.
The functions are bound at import, before nvtx_mirror patches the module attributes, so the
advisor's own ranges are never mirrored into the profiler as user regions.
"""
from __future__ import annotations

import contextlib

import torch

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
