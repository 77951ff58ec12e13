"""What every Triton launcher shares: input checks, row views, block sizes, warps.

Importing this module imports triton, so only the kernel modules import it (specs.py must not).
"""
from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

# Public dtypes. float64 is accepted too (accumulating in float64) so that
# torch.autograd.gradcheck can check every backward in double precision.
PUBLIC_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
CHECKED_DTYPES = PUBLIC_DTYPES + (torch.float64,)

# Largest row a norm kernel keeps in registers: 64 K elements (as Liger-Kernel and
# flash-attn's fused norms); beyond it register spills make the kernel pointless.
MAX_FUSED_COLS = 65536

# NB: triton decides interpreter-or-compile when a @triton.jit function is decorated, i.e.
# when our kernel modules are imported; they import this module first, so this matches.
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "yes", "on")


def cdiv(a: int, b: int) -> int:
    """triton.cdiv for launchers. NB: triton's is a ConstexprFunction (triton >= 3.5), whose host
    call costs a few µs; launchers call it on every launch."""
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    """triton.next_power_of_2 for launchers (0 for 0, as triton's), without its call cost."""
    return 1 << (n - 1).bit_length() if n > 0 else 0


def ints(*values) -> tuple[int, ...]:
    """Sizes and strides as Python ints. AOTAutograd traces a triton_op's launcher with SymInt
    sizes under dynamic shapes: the launch settings' caches cannot hash those and constexprs
    must be ints, so int() specializes them (a shape guard). Eager sizes are ints already."""
    return tuple(int(v) for v in values)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def check_tensor(fn_name: str, arg: str, t: object,
                 dtypes: tuple[torch.dtype, ...] = CHECKED_DTYPES) -> torch.Tensor:
    """TypeError for a wrong type or dtype, ValueError for a device Triton cannot reach."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{fn_name}: {arg} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in dtypes:
        names = ", ".join(dtype_name(d) for d in dtypes)
        raise TypeError(f"{fn_name}: {arg} has dtype {dtype_name(t.dtype)}, which this Triton "
                        f"kernel does not support; use one of {names}")
    if t.device.type == "cpu" and not INTERPRETED:
        raise ValueError(f"{fn_name}: {arg} is on the CPU; Triton kernels need a CUDA tensor, or "
                         "TRITON_INTERPRET=1 set before triton is imported to run on the CPU")
    if t.device.type not in ("cuda", "cpu"):
        raise ValueError(f"{fn_name}: {arg} is on {t.device}; Triton kernels run on CUDA devices")
    return t


def check_same_device(fn_name: str, *tensors: torch.Tensor | None) -> None:
    devices = {t.device for t in tensors if t is not None}
    if len(devices) > 1:
        raise ValueError(f"{fn_name}: inputs are on different devices: {sorted(map(str, devices))}")


def acc_type(dtype: torch.dtype):
    """The accumulation type: float32 for every public dtype, float64 for float64 inputs."""
    return tl.float64 if dtype == torch.float64 else tl.float32


def acc_torch_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def as_rows(x: torch.Tensor) -> torch.Tensor:
    """A 2-D (rows, last dim) view with unit stride along the row; copies only when it must."""
    if x.dim() == 0:
        x = x.reshape(1)
    if x.stride(-1) != 1:
        x = x.contiguous()
    n_cols = x.shape[-1]
    return x.reshape(x.numel() // n_cols if n_cols else 0, n_cols)


def num_warps_for(block_elements: int) -> int:
    # NB: Liger-Kernel's thresholds (calculate_settings): each thread keeps <= 16 elements
    # of a tile in registers, so one row of up to 64K elements never spills.
    if block_elements >= 32768:
        return 32
    if block_elements >= 8192:
        return 16
    if block_elements >= 2048:
        return 8
    return 4


def rows_per_program(block_cols: int, n_rows: int, target_elements: int = 4096) -> int:
    """Pack short rows into one program (a 2-D tile) so each program moves >= ~4K elements."""
    rows = max(1, target_elements // block_cols)
    return min(next_power_of_2(rows), next_power_of_2(n_rows))


def partial_sum_programs(device: torch.device, n_row_blocks: int) -> int:
    """Programs for backward kernels that reduce over rows into per-program partial sums.

    A fixed count per device keeps the reduction order, hence the result, bitwise stable.
    """
    if device.type == "cuda":
        per_sm = 4  # NB: a few resident programs per SM hide DRAM latency; more only add partials
        target = sm_count(device) * per_sm
    else:
        target = 4  # the interpreter runs programs one after the other
    return max(1, min(n_row_blocks, target))


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors of a CUDA device, read once per device (launchers size grids
    by it on every call)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _sm_count(index)


@functools.lru_cache(maxsize=None)
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


# Elementwise kernels: 2048 elements per program, 8 warps -> 8 contiguous elements per thread,
# i.e. 16-byte (bf16/fp16) or 2x16-byte (fp32) vector accesses.
# NB: the CPU interpreter pays per op, not per element: bigger blocks, same code path.
ELEMENTWISE_BLOCK = 16384 if INTERPRETED else 2048
ELEMENTWISE_WARPS = 8


def dense(t: torch.Tensor) -> torch.Tensor:
    """`t` if contiguous, else a contiguous copy: elementwise kernels walk its numel() elements
    in memory order, whatever its shape, and their outputs (empty_like) keep that shape.
    NB: no 1-D view and back, a few µs of host time a call."""
    return t if t.is_contiguous() else t.contiguous()


def elementwise_grid(n: int) -> tuple[int]:
    return (cdiv(n, ELEMENTWISE_BLOCK),)


@triton.jit
def online_update(m, s, x):
    """One step of the per-lane online max/sum: (max(m, x), s rescaled + exp(x - max)).

    One exp per element, not two: exp(-|x - m|) is exp(m - x) when x is the new max (the old
    sum is rescaled, the new term is exp(0) = 1) and exp(x - m) otherwise. A lane that has
    seen only -inf keeps s == 0 (-inf - -inf would be NaN).
    """
    m_new = tl.maximum(m, x)
    d = x - m
    e = tl.exp(tl.where(d > 0, -d, d))
    e = tl.where(m_new == -float("inf"), 0.0, e)
    s = tl.where(x > m, s * e + 1.0, s + e)
    return m_new, s
