"""softmax and log_softmax over the last dim, forward and backward.

Rows up to SINGLE_BLOCK_COLS stay in registers (several short rows per program); longer rows
take two passes with an online max/sum (Milakov & Gimelshein, 2018), the second pass mostly
served from L2. Fewer long rows than 4 programs per SM are split over several programs each
(rowsplit.py): per-segment max/sum partials, then a merge in every program that writes a block.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from reference_kernels.triton._common import (
    INTERPRETED, acc_torch_dtype, acc_type, as_rows, cdiv, check_tensor, ints, next_power_of_2,
    num_warps_for, online_update, rows_per_program)
from reference_kernels.triton import rowsplit
from reference_kernels.triton._ops import kernel_op, launcher
from reference_kernels.triton.rowsplit import load_partials, row_and_cols, row_and_segment

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


@triton.jit
def _softmax_split_stats(x_ptr, max_ptr, sum_ptr, n_cols, x_row_stride, seg_cols, n_segs,
                         ACC: tl.constexpr, BLOCK: tl.constexpr):
    # Program (row, segment): reads seg_cols*elt of x, writes the segment's max and its sum
    # of exp(x - max): 2 floats.
    row, seg = row_and_segment(n_segs)
    x_row = x_ptr + row * x_row_stride
    cols = tl.arange(0, BLOCK)
    m = tl.full([BLOCK], -float("inf"), ACC)
    s = tl.zeros([BLOCK], ACC)
    for off in range(0, seg_cols, BLOCK):
        c = seg * seg_cols + off + cols
        m, s = online_update(m, s, tl.load(x_row + c, mask=c < n_cols,
                                             other=-float("inf")).to(ACC))
    seg_max = tl.max(m, axis=0)
    shift = tl.where(seg_max == -float("inf"), 0.0, seg_max)
    tl.store(max_ptr + row * n_segs + seg, seg_max)
    tl.store(sum_ptr + row * n_segs + seg, tl.sum(s * tl.exp(m - shift), axis=0))


@triton.jit
def _softmax_split_apply(x_ptr, y_ptr, max_ptr, sum_ptr, n_cols, x_row_stride, n_segs,
                         LOG: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr,
                         SEGS: tl.constexpr):
    # Program (row, column block): reads the row's 2*n_segs partials (L2) and BLOCK*elt of
    # x, writes BLOCK*elt of y. The merge is the online update's, over segments.
    row, cols = row_and_cols(n_cols, BLOCK)
    seg_max = load_partials(max_ptr, row, n_segs, SEGS, -float("inf"))
    seg_sum = load_partials(sum_ptr, row, n_segs, SEGS, 0.0)
    row_max = tl.max(seg_max, axis=0)
    shift = tl.where(row_max == -float("inf"), 0.0, row_max)
    row_sum = tl.sum(seg_sum * tl.exp(seg_max - shift), axis=0)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(ACC)
    if LOG:
        y = x - row_max - tl.log(row_sum)
    else:
        y = tl.exp(x - row_max) / row_sum
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_bwd_split_stats(y_ptr, dy_ptr, part_ptr, n_cols, y_row_stride, dy_row_stride,
                             seg_cols, n_segs, LOG: tl.constexpr, ACC: tl.constexpr,
                             BLOCK: tl.constexpr):
    # Program (row, segment): reads seg_cols*elt of dy (and of y for softmax), writes one
    # float: the segment's sum(dy*y) (softmax) or sum(dy) (log_softmax).
    row, seg = row_and_segment(n_segs)
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], ACC)
    for off in range(0, seg_cols, BLOCK):
        c = seg * seg_cols + off + cols
        mask = c < n_cols
        dy = tl.load(dy_ptr + row * dy_row_stride + c, mask=mask, other=0.0).to(ACC)
        if LOG:
            acc += dy
        else:
            acc += dy * tl.load(y_ptr + row * y_row_stride + c, mask=mask, other=0.0).to(ACC)
    tl.store(part_ptr + row * n_segs + seg, tl.sum(acc, axis=0))


@triton.jit
def _softmax_bwd_split_apply(y_ptr, dy_ptr, dx_ptr, part_ptr, n_cols, y_row_stride,
                             dy_row_stride, n_segs, LOG: tl.constexpr, ACC: tl.constexpr,
                             BLOCK: tl.constexpr, SEGS: tl.constexpr):
    # Program (row, column block): reads n_segs partials (L2), BLOCK*elt of y and of dy,
    # writes BLOCK*elt of dx.
    row, cols = row_and_cols(n_cols, BLOCK)
    total = tl.sum(load_partials(part_ptr, row, n_segs, SEGS, 0.0), axis=0)
    mask = cols < n_cols
    y = tl.load(y_ptr + row * y_row_stride + cols, mask=mask, other=0.0).to(ACC)
    dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=mask, other=0.0).to(ACC)
    if LOG:
        dx = dy - tl.exp(y) * total
    else:
        dx = y * (dy - total)
    tl.store(dx_ptr + row * n_cols + cols, dx.to(dx_ptr.dtype.element_ty), mask=mask)


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
    block_n = next_power_of_2(n_cols)
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
    if n_cols <= SINGLE_BLOCK_COLS and rowsplit.FORCE is None:
        config = config or block_config(n_rows, n_cols)
        grid = (cdiv(n_rows, config.block_m),)
        launcher(_softmax_fwd_block)[grid](
            x2d, y, n_rows, n_cols, row_stride, LOG=log, ACC=acc, BLOCK_M=config.block_m,
            BLOCK_N=next_power_of_2(n_cols), num_warps=config.num_warps)
    elif rowsplit.few_rows(n_rows, x2d.device):
        _softmax_fwd_split(x2d, y, log)
    else:
        launcher(_softmax_fwd_loop)[(n_rows,)](
            x2d, y, n_cols, row_stride, LOG=log, ACC=acc, BLOCK_N=LOOP_BLOCK_COLS,
            num_warps=num_warps_for(LOOP_BLOCK_COLS))
    return y


def _softmax_fwd_split(x2d: torch.Tensor, y: torch.Tensor, log: bool) -> None:
    """Few long rows: each row over config.segments stats programs, then one apply program
    per BLOCK columns (rowsplit.py)."""
    n_rows, n_cols, row_stride = ints(*x2d.shape, x2d.stride(0))
    config = rowsplit.split_for(n_rows, n_cols, x2d.device)
    acc = acc_type(x2d.dtype)
    stats = torch.empty((2, n_rows, config.segments), dtype=acc_torch_dtype(x2d.dtype),
                        device=x2d.device)
    launcher(_softmax_split_stats)[rowsplit.stats_grid(n_rows, config)](
        x2d, stats[0], stats[1], n_cols, row_stride, config.seg_cols, config.segments,
        ACC=acc, BLOCK=config.block, num_warps=config.num_warps)
    launcher(_softmax_split_apply)[rowsplit.apply_grid(n_rows, n_cols, config)](
        x2d, y, stats[0], stats[1], n_cols, row_stride, config.segments, LOG=log, ACC=acc,
        BLOCK=config.block, SEGS=config.segs_block, num_warps=config.num_warps)


def softmax_bwd(y2d: torch.Tensor, dy2d: torch.Tensor, log: bool,
                config: BlockConfig | None = None) -> torch.Tensor:
    """Gradient of softmax/log_softmax from its output y and the upstream gradient dy."""
    n_rows, n_cols = ints(*y2d.shape)
    dx = torch.empty((n_rows, n_cols), dtype=y2d.dtype, device=y2d.device)
    if dx.numel() == 0:
        return dx
    acc = acc_type(y2d.dtype)
    strides = ints(y2d.stride(0), dy2d.stride(0))
    if n_cols <= SINGLE_BLOCK_COLS and rowsplit.FORCE is None:
        config = config or block_config(n_rows, n_cols)
        grid = (cdiv(n_rows, config.block_m),)
        launcher(_softmax_bwd_block)[grid](
            y2d, dy2d, dx, n_rows, n_cols, *strides, LOG=log, ACC=acc, BLOCK_M=config.block_m,
            BLOCK_N=next_power_of_2(n_cols), num_warps=config.num_warps)
    elif rowsplit.few_rows(n_rows, y2d.device):
        _softmax_bwd_split(y2d, dy2d, dx, log)
    else:
        launcher(_softmax_bwd_loop)[(n_rows,)](
            y2d, dy2d, dx, n_cols, *strides, LOG=log, ACC=acc, BLOCK_N=LOOP_BLOCK_COLS,
            num_warps=num_warps_for(LOOP_BLOCK_COLS))
    return dx


def _softmax_bwd_split(y2d: torch.Tensor, dy2d: torch.Tensor, dx: torch.Tensor,
                       log: bool) -> None:
    """Few long rows: per-segment partial sums, then one apply program per BLOCK columns."""
    n_rows, n_cols = ints(*y2d.shape)
    strides = ints(y2d.stride(0), dy2d.stride(0))
    config = rowsplit.split_for(n_rows, n_cols, y2d.device)
    acc = acc_type(y2d.dtype)
    part = torch.empty((n_rows, config.segments), dtype=acc_torch_dtype(y2d.dtype),
                       device=y2d.device)
    launcher(_softmax_bwd_split_stats)[rowsplit.stats_grid(n_rows, config)](
        y2d, dy2d, part, n_cols, *strides, config.seg_cols, config.segments, LOG=log,
        ACC=acc, BLOCK=config.block, num_warps=config.num_warps)
    launcher(_softmax_bwd_split_apply)[rowsplit.apply_grid(n_rows, n_cols, config)](
        y2d, dy2d, dx, part, n_cols, *strides, config.segments, LOG=log, ACC=acc,
        BLOCK=config.block, SEGS=config.segs_block, num_warps=config.num_warps)


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
