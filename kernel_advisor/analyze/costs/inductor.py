"""Bytes per launch of an Inductor-generated Triton kernel, from Inductor's own metadata.

When torch._inductor.config.benchmark_kernel (or profile_bandwidth) is on, Inductor writes
`'kernel_num_gb': <GB>` into the inductor_meta of each generated kernel's decorator
(torch/_inductor/codegen/triton.py, TritonKernel.inductor_meta_common; the estimate comes
from SIMDKernel.estimate_kernel_num_bytes: every buffer argument once, sliced buffers at
their slice size). The trace's cpu_op for a triton kernel carries kernel_file and
kernel_name; without the flag, or without the file on this machine, there is no number.
"""
from __future__ import annotations

import functools
import os
import re

# The metadata number may be printed in scientific notation (8.836e-06).
_NUM_GB = re.compile(r"""['"]kernel_num_gb['"]\s*:\s*([0-9.]+(?:[eE][-+]?[0-9]+)?)""")
_DECORATOR = "@triton_heuristics."
_BYTES_PER_GB = 1e9


@functools.lru_cache(maxsize=512)
def _read(path: str, mtime_ns: int, size: int) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def _kernel_header(source: str, kernel_name: str) -> str | None:
    """The decorator block just above `def <kernel_name>(` (a file may hold several kernels
    when it is Inductor's wrapper module rather than the per-kernel file)."""
    match = re.search(rf"^def {re.escape(kernel_name)}\(", source, flags=re.MULTILINE)
    if match is None:
        return None
    start = source.rfind(_DECORATOR, 0, match.start())
    return source[start:match.start()] if start >= 0 else None


def inductor_kernel_bytes(kernel_file: str, kernel_name: str) -> float | None:
    """Bytes one launch moves per Inductor's estimate, or None when not recorded."""
    if not kernel_file or not kernel_name:
        return None
    try:
        stat = os.stat(kernel_file)
        source = _read(kernel_file, stat.st_mtime_ns, stat.st_size)
    except OSError:
        return None
    header = _kernel_header(source, kernel_name)
    found = _NUM_GB.search(header) if header else None
    if found is None:
        return None
    try:
        return float(round(float(found.group(1)) * _BYTES_PER_GB))
    except ValueError:
        return None
