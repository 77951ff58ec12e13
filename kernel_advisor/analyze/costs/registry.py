"""The cost record, the per-op formula registry and the lookup everything else calls."""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from kernel_advisor.analyze.costs.call import OpCall, Tensor
from kernel_advisor.analyze.costs.shapes import Shape, Unmodelled


@dataclass(frozen=True)
class OpCost:
    flops: float  # per call
    bytes: float  # minimum bytes per call: each input read once, each output written once
    compute_dtype: str  # torch dtype name deciding the compute path, e.g. "float32", "bfloat16"
    uses_tensor_cores: bool  # matmul/conv/attention family (tensor-core eligible)


Formula = Callable[[OpCall], OpCost]
_FORMULAS: dict[str, Formula] = {}


def qualified(name: str) -> str:
    return name if "::" in name else f"aten::{name}"


def register(*names: str) -> Callable[[Formula], Formula]:
    """Register a formula for ops named like the trace names them ("mm" means "aten::mm")."""

    def add(formula: Formula) -> Formula:
        for name in names:
            key = qualified(name)
            if key in _FORMULAS:
                raise RuntimeError(f"two cost formulas registered for {key}")
            _FORMULAS[key] = formula
        return formula

    return add


def op_cost(name: str, input_shapes: Sequence, input_dtypes: Sequence,
            concrete_inputs: Sequence | None) -> OpCost | None:
    """FLOPs and minimum bytes of one call, or None when the op or these arguments are not
    modelled (unknown is not zero)."""
    formula = _FORMULAS.get(name)
    if formula is None:
        return None
    try:
        call = OpCall.from_trace(name, input_shapes, input_dtypes, concrete_inputs)
        return formula(call)
    except Unmodelled:
        return None


def cost_arguments(name: str, input_shapes: Sequence, input_dtypes: Sequence,
                   concrete_inputs: Sequence | None) -> tuple[tuple[int, str], ...]:
    """The concrete (non-tensor) arguments this call's cost depends on, as (position, text).

    These are exactly the values the op's formula reads (stride, padding, groups, dims,
    scale factors, ...): two calls with equal shapes, dtypes and cost arguments cost the
    same, so op rows may merge them; calls that differ in any of them may not. Views'
    offsets and indices, which no formula reads, are left out, and a Scalar operand read
    only for type promotion counts by its category (`x * 0.5` and `x * 0.25` share a row).
    Empty for unmodelled ops.
    """
    formula = _FORMULAS.get(name)
    if formula is None:
        return ()
    try:
        call = OpCall.from_trace(name, input_shapes, input_dtypes, concrete_inputs)
    except Unmodelled:
        return ()
    try:
        formula(call)
    except Unmodelled:
        pass  # the values read before giving up still tell the calls apart
    return tuple(sorted(call.reads.items()))


def modelled_op_names() -> frozenset[str]:
    return frozenset(_FORMULAS)


# ------------------------------------------------------------
# Small helpers every family uses to turn tensors read and written into an OpCost.

ZERO_COST_DTYPE = "float32"  # compute dtype reported for ops that do no arithmetic at all


def read_bytes(tensors: Iterable[Tensor | None]) -> int:
    """Each tensor read once at its real size: a broadcast operand is not re-read per use."""
    return sum(t.bytes for t in tensors if t is not None)


def written(shape: Shape, dtype: str) -> Tensor:
    """An output the formula derived; a negative size means the recorded arguments are not
    ones ATen would accept."""
    if any(not isinstance(s, int) or s < 0 for s in shape):
        raise Unmodelled(f"derived output shape {tuple(shape)} is invalid")
    return Tensor(tuple(shape), dtype)


def cost(flops: float, bytes_moved: float, compute_dtype: str,
         tensor_cores: bool = False) -> OpCost:
    if flops < 0 or bytes_moved < 0:
        raise Unmodelled(f"negative cost ({flops} flops, {bytes_moved} bytes) from bad arguments")
    return OpCost(float(flops), float(bytes_moved), compute_dtype, tensor_cores)


def io_cost(flops: float, reads: Iterable[Tensor | None], writes: Iterable[Tensor | None],
            compute_dtype: str, tensor_cores: bool = False) -> OpCost:
    """The common case: read every input once, write every output once."""
    return cost(flops, read_bytes(reads) + read_bytes(writes), compute_dtype, tensor_cores)


# ------------------------------------------------------------
# Bytes per launch of an Inductor-generated Triton kernel, from Inductor's own metadata.
#
# When torch._inductor.config.benchmark_kernel (or profile_bandwidth) is on, Inductor writes
# `'kernel_num_gb': <GB>` into the inductor_meta of each generated kernel's decorator
# (torch/_inductor/codegen/triton.py, TritonKernel.inductor_meta_common; the estimate comes
# from SIMDKernel.estimate_kernel_num_bytes: every buffer argument once, sliced buffers at
# their slice size). The trace's cpu_op for a triton kernel carries kernel_file and
# kernel_name; without the flag, or without the file on this machine, there is no number.

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
