"""NVTX ranges for the advisor's own phases, so an Nsight Systems capture reads well.

Uses the `nvtx` package when installed, else torch.cuda.nvtx on a CUDA machine, else nothing.
"""
from __future__ import annotations

import contextlib

import torch

try:
    import nvtx as _nvtx
except ImportError:  # the package is a dependency, but a bare GPU image may lack it
    _nvtx = None


def nvtx_range(name: str):
    if _nvtx is not None:
        return _nvtx.annotate(name, domain="kernel_advisor")
    if torch.cuda.is_available():
        return _torch_range(name)
    return contextlib.nullcontext()


@contextlib.contextmanager
def _torch_range(name: str):
    torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        torch.cuda.nvtx.range_pop()
