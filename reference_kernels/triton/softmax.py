"""softmax and log_softmax over the last dim, forward and backward.

Rows up to SINGLE_BLOCK_COLS stay in registers (several short rows per program); longer rows
take two passes with an online max/sum (Milakov & Gimelshein, 2018), the second pass mostly
served from L2.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from reference_kernels.triton._common import (
    INTERPRETED, acc_type, as_rows, check_tensor, ints, num_warps_for, online_update,
    rows_per_program,
)
from reference_kernels.triton._ops import kernel_op, launcher

SINGLE_BLOCK_COLS = 32768
# NB: the CPU interpreter pays per op, not per element: bigger chunks, same code path.
LOOP_BLOCK_COLS = 16384 if INTERPRETED else 4096


@triton.jit
def _softmax_fwd_block(x_ptr, y_ptr, n_rows, n_cols, x_row_stride,
                       LOG: tl.constexpr, ACC: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Reads n_cols*elt and writes n_cols*elt bytes per row: the minimum.
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols[None, :] < n_cols
    # Rows past the end re-read the last row (never stored) instead of producing -inf - -inf.
    rows_in = tl.minimum(rows, n_rows - 1).to(tl.int64)
    x = tl.load(x_ptr + rows_in[:, None] * x_row_stride + cols[None, :], mask=col_ok,
                other=-float("inf")).to(ACC)
    z = x - tl.max(x, axis=1)[:, None]
    num = tl.exp(z)
    den = tl.sum(num, axis=1)
    if LOG:
        y = z - tl.log(den)[:, None]
    else:
        y = num * (1.0 / den)[:, None]
    out = y_ptr + rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    tl.store(out, y.to(y_ptr.dtype.element_ty), mask=(rows[:, None] < n_rows) & col_ok)


@triton.jit
def _softmax_fwd_loop(x_ptr, y_ptr, n_cols, x_row_stride,
                      LOG: tl.constexpr, ACC: tl.constexpr, BLOCK_N: tl.constexpr):
    # One row per program. Pass 1 reads n_cols*elt; pass 2 reads n_cols*elt again (L2 hits
    # while the row fits) and writes n_cols*elt. Minimum DRAM traffic: 2*n_cols*elt.
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * x_row_stride
    cols = tl.arange(0, BLOCK_N)
    m = tl.full([BLOCK_N], -float("inf"), ACC)  # per-lane running max
    s = tl.zeros([BLOCK_N], ACC)  # per-lane running sum of exp(x - m)
    for start in range(0, n_cols, BLOCK_N):
        x = tl.load(x_row + start + cols, mask=start + cols < n_cols,
                    other=-float("inf")).to(ACC)
        m, s = online_update(m, s, x)
    row_max = tl.max(m, axis=0)
    shift = tl.where(row_max == -float("inf"), 0.0, row_max)
    row_sum = tl.sum(s * tl.exp(m - shift), axis=0)
    for start in range(0, n_cols, BLOCK_N):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(ACC)
        if LOG:
            y = x - row_max - tl.log(row_sum)
        else:
            y = tl.exp(x - row_max) / row_sum
        tl.store(y_ptr + row * n_cols + start + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_bwd_block(y_ptr, dy_ptr, dx_ptr, n_rows, n_cols, y_row_stride, dy_row_stride,
                       LOG: tl.constexpr, ACC: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # softmax: dx = y*(dy - sum(dy*y)); log_softmax: dx = dy - exp(y)*sum(dy).
    # Reads 2*n_cols*elt (y, dy) and writes n_cols*elt (dx) per row.
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows[:, None] < n_rows) & (cols[None, :] < n_cols)
    rows64 = rows.to(tl.int64)[:, None]
    y = tl.load(y_ptr + rows64 * y_row_stride + cols[None, :], mask=mask, other=0.0).to(ACC)
    dy = tl.load(dy_ptr + rows64 * dy_row_stride + cols[None, :], mask=mask, other=0.0).to(ACC)
    if LOG:
        dx = dy - tl.exp(y) * tl.sum(dy, axis=1)[:, None]
    else:
        dx = y * (dy - tl.sum(dy * y, axis=1)[:, None])
    tl.store(dx_ptr + rows64 * n_cols + cols[None, :], dx.to(dx_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_bwd_loop(y_ptr, dy_ptr, dx_ptr, n_cols, y_row_stride, dy_row_stride,
                      LOG: tl.constexpr, ACC: tl.constexpr, BLOCK_N: tl.constexpr):
    # Pass 1 reads y and dy (or dy alone for log_softmax); pass 2 reads both again and
    # writes dx. Minimum DRAM traffic: 3*n_cols*elt per row.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_N], ACC)
    for start in range(0, n_cols, BLOCK_N):
        mask = start + cols < n_cols
        dy = tl.load(dy_ptr + row * dy_row_stride + start + cols, mask=mask, other=0.0).to(ACC)
        if LOG:
            acc += dy
        else:
            acc += dy * tl.load(y_ptr + row * y_row_stride + start + cols, mask=mask,
                                other=0.0).to(ACC)
    total = tl.sum(acc, axis=0)
    for start in range(0, n_cols, BLOCK_N):
        mask = start + cols < n_cols
        y = tl.load(y_ptr + row * y_row_stride + start + cols, mask=mask, other=0.0).to(ACC)
        dy = tl.load(dy_ptr + row * dy_row_stride + start + cols, mask=mask, other=0.0).to(ACC)
        if LOG:
            dx = dy - tl.exp(y) * total
        else:
            dx = y * (dy - total)
        tl.store(dx_ptr + row * n_cols + start + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


@dataclass(frozen=True)
class BlockConfig:
    """Launch of the in-register kernels (rows up to SINGLE_BLOCK_COLS): rows per program
    (a power of two) and warps."""

    block_m: int
    num_warps: int


# Rows up to this many columns live in one warp (<= 4 elements per lane), ONE_WARP_ELEMENTS
# per program. NB: measured on an H200 (benchmarks/tune_rowwise.py), 32768 x 127: the
# default 32 rows x 8 warps spread each row over 4 warps and reduced through shared memory
# with barriers (bf16 softmax 17.9 us, eager 12.6); 8 rows in one warp reduce with shuffles
# only (10.4 us; fp32 18.6 -> 13.3 us, backward bf16 17.6 -> 13.1 us). 16-32 rows per warp
# spilled (15.7 us and worse); 1024-column rows keep the default (4 rows x 8 warps).
ONE_WARP_COLS = 128
ONE_WARP_ELEMENTS = 1024


@functools.lru_cache(maxsize=1024)
def block_config(n_rows: int, n_cols: int) -> BlockConfig:
    block_n = triton.next_power_of_2(n_cols)
    block_m = rows_per_program(block_n, n_rows)
    if block_n <= ONE_WARP_COLS:
        return BlockConfig(min(block_m, ONE_WARP_ELEMENTS // block_n), 1)
    return BlockConfig(block_m, num_warps_for(block_m * block_n))


def softmax_fwd(x2d: torch.Tensor, log: bool, config: BlockConfig | None = None) -> torch.Tensor:
    """softmax (log=False) or log_softmax of each row of a (rows, cols) unit-stride view."""
    n_rows, n_cols, row_stride = ints(*x2d.shape, x2d.stride(0))
    y = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=x2d.device)
    if y.numel() == 0:
        return y
    acc = acc_type(x2d.dtype)
    if n_cols <= SINGLE_BLOCK_COLS:
        config = config or block_config(n_rows, n_cols)
        grid = (triton.cdiv(n_rows, config.block_m),)
        launcher(_softmax_fwd_block)[grid](
            x2d, y, n_rows, n_cols, row_stride, LOG=log, ACC=acc, BLOCK_M=config.block_m,
            BLOCK_N=triton.next_power_of_2(n_cols), num_warps=config.num_warps)
    else:
        launcher(_softmax_fwd_loop)[(n_rows,)](
            x2d, y, n_cols, row_stride, LOG=log, ACC=acc, BLOCK_N=LOOP_BLOCK_COLS,
            num_warps=num_warps_for(LOOP_BLOCK_COLS))
    return y


def softmax_bwd(y2d: torch.Tensor, dy2d: torch.Tensor, log: bool,
                config: BlockConfig | None = None) -> torch.Tensor:
    """Gradient of softmax/log_softmax from its output y and the upstream gradient dy."""
    n_rows, n_cols = ints(*y2d.shape)
    dx = torch.empty((n_rows, n_cols), dtype=y2d.dtype, device=y2d.device)
    if dx.numel() == 0:
        return dx
    acc = acc_type(y2d.dtype)
    strides = ints(y2d.stride(0), dy2d.stride(0))
    if n_cols <= SINGLE_BLOCK_COLS:
        config = config or block_config(n_rows, n_cols)
        grid = (triton.cdiv(n_rows, config.block_m),)
        launcher(_softmax_bwd_block)[grid](
            y2d, dy2d, dx, n_rows, n_cols, *strides, LOG=log, ACC=acc, BLOCK_M=config.block_m,
            BLOCK_N=triton.next_power_of_2(n_cols), num_warps=config.num_warps)
    else:
        launcher(_softmax_bwd_loop)[(n_rows,)](
            y2d, dy2d, dx, n_cols, *strides, LOG=log, ACC=acc, BLOCK_N=LOOP_BLOCK_COLS,
            num_warps=num_warps_for(LOOP_BLOCK_COLS))
    return dx


def _like(x: torch.Tensor) -> torch.Tensor:
    """Fake implementation: a contiguous tensor of x's shape, dtype and device."""
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@kernel_op("softmax", _like)
def _softmax_op(x: torch.Tensor) -> torch.Tensor:
    return softmax_fwd(as_rows(x), False).view(x.shape)


@kernel_op("log_softmax", _like)
def _log_softmax_op(x: torch.Tensor) -> torch.Tensor:
    return softmax_fwd(as_rows(x), True).view(x.shape)


@kernel_op("softmax_backward", lambda y, dy, log: _like(y))
def _softmax_backward_op(y: torch.Tensor, dy: torch.Tensor, log: bool) -> torch.Tensor:
    """Input gradient of softmax (log=False) or log_softmax over the last dim, from the output."""
    return softmax_bwd(as_rows(y), as_rows(dy), log).view(y.shape)


def _save_output(ctx, inputs, output) -> None:
    ctx.save_for_backward(output)


def _softmax_backward(ctx, dy: torch.Tensor):
    (y,) = ctx.saved_tensors
    return _softmax_backward_op(y, dy.to(y.dtype), False)


def _log_softmax_backward(ctx, dy: torch.Tensor):
    (y,) = ctx.saved_tensors
    return _softmax_backward_op(y, dy.to(y.dtype), True)


_softmax_op.register_autograd(_softmax_backward, setup_context=_save_output)
_log_softmax_op.register_autograd(_log_softmax_backward, setup_context=_save_output)


def _apply(fn_name: str, op, x: torch.Tensor, dim: int) -> torch.Tensor:
    check_tensor(fn_name, "x", x)
    if x.dim() == 0:
        return op(x.reshape(1)).reshape(())
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"{fn_name}: dim {dim} is out of range for a {x.dim()}-d tensor")
    if dim % x.dim() == x.dim() - 1:
        return op(x)
    # Another dim: normalise a copy with that dim moved last (one extra read and write).
    return op(x.movedim(dim, -1).contiguous()).movedim(-1, dim)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """torch.softmax(x, dim) for float32/float16/bfloat16 (float64 for gradcheck)."""
    return _apply("softmax", _softmax_op, x, dim)


def log_softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """torch.log_softmax(x, dim) for float32/float16/bfloat16 (float64 for gradcheck)."""
    return _apply("log_softmax", _log_softmax_op, x, dim)
