"""LayerNorm and RMSNorm over the last dim, optionally fused with the residual add before it.

One forward and one backward kernel serve all four variants through constexpr flags, so the
arithmetic is shared: layer_norm.py and rms_norm.py hold the public launchers.
Rows up to MAX_FUSED_COLS stay in registers; short rows are packed several per program;
longer rows are split over several programs (norm_split.py).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

import torch
import triton
import triton.language as tl

from reference_kernels.triton._common import (
    MAX_FUSED_COLS, acc_torch_dtype, acc_type, cdiv, ints, next_power_of_2, num_warps_for,
    partial_sum_programs, rows_per_program, sm_count)
from reference_kernels.triton import rowsplit
from reference_kernels.triton._ops import kernel_op, launcher
from reference_kernels.triton.norm_split import split_norm_bwd, split_norm_fwd


@triton.jit
def _norm_fwd(x_ptr, res_ptr, w_ptr, b_ptr, y_ptr, h_ptr, mean_ptr, rstd_ptr,
              n_rows, n_cols, eps, x_row_stride, res_row_stride,
              IS_RMS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, HAS_WEIGHT: tl.constexpr,
              HAS_BIAS: tl.constexpr, ACC: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # Per row reads n_cols*elt (x) [+ n_cols*elt residual], writes n_cols*elt (y)
    # [+ n_cols*elt new residual h = x + residual] and 4 or 8 bytes of mean/rstd;
    # weight and bias (n_cols each) are read once per program and stay in L2.
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < n_rows
    rows64 = rows.to(tl.int64)[:, None]
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    mask = row_ok[:, None] & col_ok[None, :]
    x = tl.load(x_ptr + rows64 * x_row_stride + cols[None, :], mask=mask, other=0.0).to(ACC)
    if HAS_RESIDUAL:
        x += tl.load(res_ptr + rows64 * res_row_stride + cols[None, :], mask=mask,
                     other=0.0).to(ACC)
        h = x.to(h_ptr.dtype.element_ty)
        tl.store(h_ptr + rows64 * n_cols + cols[None, :], h, mask=mask)
        # Normalise h as stored (as eager x + residual does): the backward, which re-reads h,
        # then differentiates exactly the function the forward computed.
        x = h.to(ACC)
    if IS_RMS:
        xc = x
    else:
        mean = tl.sum(x, axis=1) / n_cols
        tl.store(mean_ptr + rows, mean, mask=row_ok)
        xc = tl.where(mask, x - mean[:, None], 0.0)
    # NB: eps arrives as fp32 from a direct launch and as fp64 from Inductor's (triton_op under
    # torch.compile): cast, so compiled and eager results agree bit for bit.
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=1) / n_cols + tl.cast(eps, ACC))
    tl.store(rstd_ptr + rows, rstd, mask=row_ok)
    y = xc * rstd[:, None]
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(ACC)[None, :]
    if HAS_BIAS:
        y = y + tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(ACC)[None, :]
    tl.store(y_ptr + rows64 * n_cols + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _load_rows(ptr, rows, row_ok, row_stride, cols, col_ok):
    # A (BLOCK_M, BLOCK_N) tile in the storage dtype.
    mask = row_ok[:, None] & col_ok[None, :]
    return tl.load(ptr + rows.to(tl.int64)[:, None] * row_stride + cols[None, :], mask=mask,
                   other=0.0)


@triton.jit
def _norm_bwd(x_ptr, w_ptr, mean_ptr, rstd_ptr, dy_ptr, dres_ptr, dx_ptr, dw_ptr, db_ptr,
              n_rows, n_cols, x_row_stride, dy_row_stride, dres_row_stride,
              IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, NEED_DW: tl.constexpr,
              NEED_DB: tl.constexpr, HAS_DRES: tl.constexpr, STAGES: tl.constexpr,
              ACC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # xhat = (x - mean)*rstd (mean = 0 for RMS), g = w*dy:
    # dx = rstd*(g - xhat*mean(g*xhat) - mean(g)) [RMS: no mean(g) term] (+ dres).
    # Per row reads 2*n_cols*elt (x, dy) [+ n_cols*elt dres], writes n_cols*elt (dx).
    # dw = sum(dy*xhat), db = sum(dy) over this program's rows: one fp32 partial row each
    # (programs*n_cols*4 bytes written, re-read once by _sum_parts).
    # Row blocks are dealt round-robin (program p takes blocks p, p + programs, ...), so at
    # any time the programs stream neighbouring rows. NB: one run of rows per program, 132
    # regions streamed at once, took 3 % longer in bf16 and 4-5 % in fp32 on an H200
    # (benchmarks/studies/explore_norm_backward.py).
    # STAGES > 1: Triton's pipeliner copies the next STAGES - 1 row blocks into shared memory
    # with cp.async while this one is reduced: with ~1 program per SM, loads stay in flight
    # through the reductions at no register cost (2 * (STAGES - 1) tiles of shared memory).
    pid = tl.program_id(0)
    n_progs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(ACC)[None, :]
    dw_acc = tl.zeros([BLOCK_N], ACC)
    db_acc = tl.zeros([BLOCK_N], ACC)
    for block in tl.range(pid, tl.cdiv(n_rows, BLOCK_M), n_progs, num_stages=STAGES):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < n_rows
        x = _load_rows(x_ptr, rows, row_ok, x_row_stride, cols, col_ok).to(ACC)
        dy = _load_rows(dy_ptr, rows, row_ok, dy_row_stride, cols, col_ok).to(ACC)
        if HAS_DRES:
            dres = _load_rows(dres_ptr, rows, row_ok, dres_row_stride, cols, col_ok)
        rstd = tl.load(rstd_ptr + rows, mask=row_ok, other=0.0)[:, None]
        # Masked-off elements load as 0, so dy and g are 0 there: they add nothing to the
        # sums or to dw/db whatever xhat is, and their dx is never stored.
        if IS_RMS:
            xhat = x * rstd
        else:
            mean = tl.load(mean_ptr + rows, mask=row_ok, other=0.0)[:, None]
            xhat = (x - mean) * rstd
        g = dy
        if HAS_WEIGHT:
            g = dy * w
        c1 = tl.sum(g * xhat, axis=1)[:, None] / n_cols
        # dx = g*rstd - (xhat*(c1*rstd) + c2*rstd): two FMAs a element after the row terms
        if IS_RMS:
            dx = g * rstd - xhat * (c1 * rstd)
        else:
            c2 = tl.sum(g, axis=1)[:, None] / n_cols
            dx = g * rstd - (xhat * (c1 * rstd) + c2 * rstd)
        if HAS_DRES:
            dx += dres.to(ACC)
        tl.store(dx_ptr + rows.to(tl.int64)[:, None] * n_cols + cols[None, :],
                 dx.to(dx_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])
        if NEED_DW:
            dw_acc += tl.sum(dy * xhat, axis=0)
        if NEED_DB:
            db_acc += tl.sum(dy, axis=0)
    if NEED_DW:
        tl.store(dw_ptr + pid * n_cols + cols, dw_acc, mask=col_ok)
    if NEED_DB:
        tl.store(db_ptr + pid * n_cols + cols, db_acc, mask=col_ok)


@triton.jit
def _sum_parts(parts_ptr, out_ptr, n_parts, n_cols, P_BLOCK: tl.constexpr,
               C_BLOCK: tl.constexpr):
    # (n_sums, n_parts, n_cols) partial rows -> (n_sums, n_cols), program (column block,
    # sum): reads n_parts*C_BLOCK*4 bytes, writes C_BLOCK*4. Fixed tiles and order: bitwise
    # reproducible for a given n_parts.
    cols = tl.program_id(0) * C_BLOCK + tl.arange(0, C_BLOCK)
    col_ok = cols < n_cols
    base = parts_ptr + tl.program_id(1).to(tl.int64) * n_parts * n_cols
    acc = tl.zeros([C_BLOCK], out_ptr.dtype.element_ty)
    for start in range(0, n_parts, P_BLOCK):
        parts = start + tl.arange(0, P_BLOCK)
        mask = (parts < n_parts)[:, None] & col_ok[None, :]
        tile = tl.load(base + parts[:, None] * n_cols + cols[None, :], mask=mask, other=0.0)
        acc += tl.sum(tile, axis=0)
    tl.store(out_ptr + tl.program_id(1) * n_cols + cols, acc, mask=col_ok)


@dataclass(frozen=True)
class FwdConfig:
    """Launch settings of _norm_fwd: rows per program (a power of two) and warps."""

    block_m: int
    num_warps: int


@dataclass(frozen=True)
class BwdConfig:
    """Launch settings of _norm_bwd: resident programs per SM, warps, cp.async pipeline
    stages over the row blocks (1: none)."""

    programs_per_sm: int
    num_warps: int
    stages: int


def _split(n_cols: int) -> bool:
    """Rows past MAX_FUSED_COLS (or any, when a test forces it) take norm_split.py's kernels."""
    return n_cols > MAX_FUSED_COLS or rowsplit.FORCE is not None


def _block_cols(n_cols: int) -> int:
    return next_power_of_2(n_cols)


def _warps_by_bytes(block_elements: int, dtype: torch.dtype) -> int:
    # Warps by the tile's bytes, as many as float32 would get for the same bytes: measured on
    # an H200 at 8192 columns, a bf16 row wants 8 warps, not 16 (forward layer_norm 0.97
    # against 0.89 of copy; backward layer_norm 0.88 against 0.85).
    return num_warps_for(block_elements * dtype.itemsize // 4)


# Rows from which the forward is bandwidth-bound and sizes warps by bytes; fewer rows are
# latency-bound and keep the element-based warps (measured on an H200, bf16: 64 x 32768 layer_norm
# 8.7 us with 32 warps against 10.5 us with 16; 16384 x 8192 the other way round, above).
MANY_ROWS = 4096


@functools.lru_cache(maxsize=1024)
def fwd_config(n_rows: int, n_cols: int, dtype: torch.dtype) -> FwdConfig:
    block_n = _block_cols(n_cols)
    block_m = rows_per_program(block_n, n_rows)
    if n_rows < MANY_ROWS:
        return FwdConfig(block_m, num_warps_for(block_m * block_n))
    return FwdConfig(block_m, _warps_by_bytes(block_m * block_n, dtype))


# NB: measured on an H200 at 16384x8192 (benchmarks/tune_rowwise.py and
# benchmarks/studies/explore_norm_backward.py): 3 stages take bf16 layer_norm to 0.96 of copy,
# from 0.70 without pipelining (rms_norm 0.97 from 0.75; fp32 rows 0.96-0.97 either way); 2
# stages lose (bf16 layer_norm 0.64), 4 lose (0.88-0.92 flushed, 0.85-0.86 back to back, against
# 0.90-0.94 and 0.91-0.94 with 3). Both layer_norm row sums in one tl.reduce stayed within
# noise; 2 rows per block (half the reduction barriers per row) lost: 0.41-0.54.
BWD_STAGES = 3


# Shared memory per block Triton may fill with pipeline buffers (an H200 allows 227 KiB per
# block; the launcher asks the device); 16 KiB stay for the reductions' scratch.
SMEM_PER_BLOCK_BYTES = 227 * 1024
SMEM_RESERVED_BYTES = 16 * 1024


@functools.lru_cache(maxsize=1024)
def bwd_config(n_rows: int, n_cols: int, dtype: torch.dtype, is_rms: bool,
               fused: bool = False, smem_bytes: int = SMEM_PER_BLOCK_BYTES) -> BwdConfig:
    tile = rows_per_program(_block_cols(n_cols), n_rows) * _block_cols(n_cols)
    # NB: measured on an H200 at 16384x8192: one program per SM beats 2 (each holds dw/db
    # accumulators for its rows: bf16 layer_norm 0.96 against 0.91; capped at 128 registers
    # so 2 fit, it spills: 0.14); bf16 layer_norm wants 8 warps (0.96 against 0.93 with 16,
    # 0.78-0.80 with 32); rms_norm is indifferent between 8 and 16 (0.98, 0.97).
    warps = num_warps_for(tile) if is_rms else _warps_by_bytes(tile, dtype)
    stage_bytes = tile * dtype.itemsize * (3 if fused else 2)  # x, dy [, dres] per stage
    return BwdConfig(max(1, 16 // num_warps_for(tile)), warps,
                     _stages_that_fit(stage_bytes, smem_bytes))


def _stages_that_fit(stage_bytes: int, smem_bytes: int) -> int:
    # STAGES - 1 buffered row blocks must fit; long rows fall back to fewer stages, then none
    # (bf16 rows of 32768 columns get 2, fp32 ones 1).
    budget = smem_bytes - SMEM_RESERVED_BYTES
    for stages in range(BWD_STAGES, 1, -1):
        if (stages - 1) * stage_bytes <= budget:
            return stages
    return 1


def _smem_per_block(device: torch.device) -> int:
    if device.type != "cuda":
        return SMEM_PER_BLOCK_BYTES  # the interpreter ignores stages
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _device_smem_per_block(index)


@functools.lru_cache(maxsize=None)
def _device_smem_per_block(index: int) -> int:
    # the limit Triton checks a launch against: opt-in shared memory per block
    return int(triton.runtime.driver.active.utils.get_device_properties(index)["max_shared_mem"])


def norm_fwd(x2d, residual2d, weight, bias, eps: float, is_rms: bool,
             config: FwdConfig | None = None):
    """Returns (y, h or None, mean or None, rstd); h = x + residual when a residual is given."""
    n_rows, n_cols = ints(*x2d.shape)
    dev, acc_dtype = x2d.device, acc_torch_dtype(x2d.dtype)
    y = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=dev)
    h = torch.empty_like(y) if residual2d is not None else None
    mean = None if is_rms else torch.empty(n_rows, dtype=acc_dtype, device=dev)
    rstd = torch.empty(n_rows, dtype=acc_dtype, device=dev)
    if y.numel() == 0:
        return y, h, mean, rstd
    if _split(n_cols):
        split_norm_fwd(x2d, residual2d, weight, bias, eps, is_rms, y, h, mean, rstd)
        return y, h, mean, rstd
    config = config or fwd_config(n_rows, n_cols, x2d.dtype)
    block_m, block_n = config.block_m, _block_cols(n_cols)
    x_stride, res_stride = ints(x2d.stride(0),
                                residual2d.stride(0) if residual2d is not None else 0)
    launcher(_norm_fwd)[(cdiv(n_rows, block_m),)](
        x2d, residual2d, weight, bias, y, h, mean, rstd, n_rows, n_cols, eps,
        x_stride, res_stride, IS_RMS=is_rms, HAS_RESIDUAL=residual2d is not None,
        HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None, ACC=acc_type(x2d.dtype),
        BLOCK_M=block_m, BLOCK_N=block_n, num_warps=config.num_warps)
    return y, h, mean, rstd


def norm_bwd(x2d, weight, mean, rstd, dy2d, dres2d, need_dw: bool, need_db: bool,
             is_rms: bool, config: BwdConfig | None = None):
    """Returns (dx, dw or None, db or None); x2d is the normalised input (h when fused).

    dw and db come back in the accumulation dtype (float32, float64 for float64 inputs).
    """
    dx, sums = _norm_bwd_sums(x2d, weight, mean, rstd, dy2d, dres2d, need_dw, need_db, is_rms,
                              config)
    dw = sums[0] if need_dw else None
    db = sums[-1] if need_db else None
    return dx, dw, db


def _norm_bwd_sums(x2d, weight, mean, rstd, dy2d, dres2d, need_dw: bool, need_db: bool,
                   is_rms: bool, config: BwdConfig | None = None):
    """(dx, sums): sums is (need_dw + need_db, n_cols), dw's row first."""
    n_rows, n_cols = ints(*x2d.shape)
    dev, acc_dtype = x2d.device, acc_torch_dtype(x2d.dtype)
    dx = torch.empty((n_rows, n_cols), dtype=x2d.dtype, device=dev)
    if _split(n_cols) and dx.numel() > 0:
        parts, runs = split_norm_bwd(x2d, weight, mean, rstd, dy2d, dres2d, dx, need_dw,
                                     need_db, is_rms)
        return dx, _sum_partials(parts, runs, dx.numel())
    if config is None:
        config, block_m, programs = _bwd_launch(n_rows, n_cols, x2d.dtype, is_rms,
                                                dres2d is not None, dev)
    else:
        block_m, programs = _bwd_grid(n_rows, n_cols, dev, config)
    block_n = _block_cols(n_cols)
    # dw and db partial rows in one tensor, so one reduction kernel sums both
    n_sums = int(need_dw) + int(need_db)
    parts = torch.empty((n_sums, programs, n_cols), dtype=acc_dtype, device=dev)
    dw_part = parts[0] if need_dw else None
    db_part = parts[n_sums - 1] if need_db else None
    if dx.numel() > 0:
        launcher(_norm_bwd)[(programs,)](
            x2d, weight, mean, rstd, dy2d, dres2d, dx, dw_part, db_part,
            n_rows, n_cols, *ints(x2d.stride(0), dy2d.stride(0),
                                  dres2d.stride(0) if dres2d is not None else 0),
            IS_RMS=is_rms, HAS_WEIGHT=weight is not None, NEED_DW=need_dw, NEED_DB=need_db,
            HAS_DRES=dres2d is not None, STAGES=config.stages, ACC=acc_type(x2d.dtype),
            BLOCK_M=block_m, BLOCK_N=block_n, num_warps=config.num_warps)
    elif n_sums:
        programs = 0  # no rows: the parameter gradients are zero
    if not n_sums:
        return dx, torch.empty((0, n_cols), dtype=acc_dtype, device=dev)
    return dx, _sum_partials(parts, programs, dx.numel())


@functools.lru_cache(maxsize=1024)
def _bwd_launch(n_rows: int, n_cols: int, dtype: torch.dtype, is_rms: bool, fused: bool,
                device: torch.device) -> tuple[BwdConfig, int, int]:
    """(config, rows per program, programs) of the backward for one shape on one device."""
    config = bwd_config(n_rows, n_cols, dtype, is_rms, fused, _smem_per_block(device))
    return (config, *_bwd_grid(n_rows, n_cols, device, config))


def _bwd_grid(n_rows: int, n_cols: int, device: torch.device,
              config: BwdConfig) -> tuple[int, int]:
    block_m = rows_per_program(_block_cols(n_cols), n_rows)
    return block_m, _bwd_programs(device, cdiv(n_rows, block_m), config.programs_per_sm)


def _bwd_programs(device: torch.device, n_row_blocks: int, per_sm: int) -> int:
    """A fixed program count per device and config (so dw/db are bitwise reproducible).

    Each program costs a partial row (2 * n_cols * 4 bytes written and re-read): at
    16384x8192 bf16, 4 programs per SM would put 69 MB of partials on 805 MB.
    """
    if device.type != "cuda":
        return partial_sum_programs(device, n_row_blocks)
    return max(1, min(n_row_blocks, sm_count(device) * per_sm))


def _sum_partials(parts: torch.Tensor, programs: int, n_elements: int) -> torch.Tensor:
    """(n_sums, programs, n_cols) partial rows -> (n_sums, n_cols): a fixed-order sum over a
    fixed number of partial rows, bitwise reproducible, in one launch for dw and db.

    NB: measured on an H200 right after the backward kernel at 16384x8192 (partials in L2,
    torch.profiler device time): _sum_parts 4.0 us (bf16 input) and 5.6 us (fp32) against
    5.2 and 8.1 us for torch's parts.sum(1). Smaller inputs are host-bound, and there
    torch's launch is the cheaper: bf16 layer_norm backward back to back (two runs on a warm
    host), torch's sum 65-76 us a call against 81-89 us with _sum_parts at every size from
    64x1024 to 8192x4096, whose GPU time (59 us) still hides behind the host's; from
    8192x8192 on the call is GPU-bound and _sum_parts 1.1-1.3 us faster (its CUDA-graph GPU
    time is 1-2.6 us lower at every size). Hence torch's sum below TRITON_SUM_MIN_ELEMENTS
    inputs on a GPU (benchmarks/studies/explore_norm_backward.py). The
    interpreter always runs _sum_parts, so CI checks it.
    """
    n_sums, _, n_cols = ints(*parts.shape)
    if not programs:
        return torch.zeros((n_sums, n_cols), dtype=parts.dtype, device=parts.device)
    if parts.device.type == "cuda" and n_elements < TRITON_SUM_MIN_ELEMENTS:
        return parts.sum(1)
    out = torch.empty((n_sums, n_cols), dtype=parts.dtype, device=parts.device)
    p_block, c_block = _sum_tile(programs)
    launcher(_sum_parts)[(cdiv(n_cols, c_block), n_sums)](
        parts, out, programs, n_cols, P_BLOCK=p_block, C_BLOCK=c_block, num_warps=SUM_WARPS)
    return out


TRITON_SUM_MIN_ELEMENTS = 1 << 26  # 8192 x 8192
SUM_WARPS = 8
SUM_TILE_ELEMENTS = 16384  # 64 fp32 values a thread with 8 warps


def _sum_tile(programs: int) -> tuple[int, int]:
    """(partial rows, columns) per tile: every partial row in one tile up to 256 of them,
    so each program issues all its loads at once; 16 to 1024 columns (64 B to 4 KiB rows)."""
    p_block = min(next_power_of_2(programs), 256)
    return p_block, max(16, min(1024, SUM_TILE_ELEMENTS // p_block))


def check_norm_args(fn_name: str, x: torch.Tensor, normalized_shape, *params) -> list[int]:
    """normalized_shape as a list; ValueError when it does not end x's shape or a
    parameter's shape differs. Any row length: rows past MAX_FUSED_COLS are split."""
    shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    if not shape or x.dim() < len(shape) or list(x.shape[-len(shape):]) != shape:
        raise ValueError(f"{fn_name}: normalized_shape {shape} must match the last dims of "
                         f"the input, which has shape {list(x.shape)}")
    for name, p in params:
        if p is not None and list(p.shape) != shape:
            raise ValueError(f"{fn_name}: {name} has shape {list(p.shape)}, expected {shape}")
    return shape


def rows_of(x: torch.Tensor, n_cols: int) -> torch.Tensor:
    """A (rows, n_cols) view with unit column stride; copies only when it must."""
    if x.dim() == 2 and x.shape[1] == n_cols:
        x2d = x
    else:
        x2d = x.reshape(x.numel() // n_cols if n_cols else 0, n_cols)
    return x2d if x2d.stride(1) == 1 or n_cols == 1 else x2d.contiguous()


# ---- operators (torch.library, see _ops.py) ---------------------------------------------
# Forward: advisor_kernels::{layer_norm, rms_norm, add_layer_norm, add_rms_norm} return the
# normalised rows (shaped like x, contiguous), the new residual h = x + residual for the fused
# pair, and the per-row statistics the backward needs (mean for layer_norm, rstd for both;
# (rows,) in the accumulation dtype, as aten::native_layer_norm's are float for 16-bit input).
# Backward: advisor_kernels::norm_backward, one operator for the four.


def _n_cols(normalized_shape) -> int:
    n = 1
    for d in normalized_shape:
        n *= d
    return n


def _n_rows(x: torch.Tensor, n_cols: int):
    return x.numel() // n_cols if n_cols else 0


def _forward(x, residual, weight, bias, normalized_shape, eps: float, is_rms: bool):
    n_cols = _n_cols(normalized_shape)
    x2d = rows_of(x, n_cols)
    r2d = rows_of(residual, n_cols) if residual is not None else None
    y, h, mean, rstd = norm_fwd(x2d, r2d, _flat(weight), _flat(bias), eps, is_rms)
    if x.dim() != 2:  # NB: skipped for 2-D inputs, the common case: a few µs of host time a call
        y, h = y.view(x.shape), (h.view(x.shape) if h is not None else None)
    return y, h, mean, rstd


def _flat(param: torch.Tensor | None) -> torch.Tensor | None:
    return param if param is None or param.dim() == 1 else param.reshape(-1)


def _fake_stats(x, normalized_shape):
    n_rows = _n_rows(x, _n_cols(normalized_shape))
    return torch.empty(n_rows, dtype=acc_torch_dtype(x.dtype), device=x.device)


def _fake_rows(x):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


@kernel_op("layer_norm", lambda x, normalized_shape, weight, bias, eps: (
    _fake_rows(x), _fake_stats(x, normalized_shape), _fake_stats(x, normalized_shape)))
def layer_norm_op(x: torch.Tensor, normalized_shape: list[int], weight: Optional[torch.Tensor],
                  bias: Optional[torch.Tensor], eps: float
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, mean, rstd) of layer_norm over the last dims; validated by the caller."""
    y, _, mean, rstd = _forward(x, None, weight, bias, normalized_shape, eps, False)
    return y, mean, rstd


@kernel_op("rms_norm", lambda x, normalized_shape, weight, eps: (
    _fake_rows(x), _fake_stats(x, normalized_shape)))
def rms_norm_op(x: torch.Tensor, normalized_shape: list[int], weight: Optional[torch.Tensor],
                eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, rstd) of rms_norm over the last dims; validated by the caller."""
    y, _, _, rstd = _forward(x, None, weight, None, normalized_shape, eps, True)
    return y, rstd


@kernel_op("add_layer_norm", lambda x, residual, normalized_shape, weight, bias, eps: (
    _fake_rows(x), _fake_rows(x), _fake_stats(x, normalized_shape),
    _fake_stats(x, normalized_shape)))
def add_layer_norm_op(x: torch.Tensor, residual: torch.Tensor, normalized_shape: list[int],
                      weight: Optional[torch.Tensor], bias: Optional[torch.Tensor], eps: float
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, h, mean, rstd): layer_norm of h = x + residual, and h."""
    return _forward(x, residual, weight, bias, normalized_shape, eps, False)


@kernel_op("add_rms_norm", lambda x, residual, normalized_shape, weight, eps: (
    _fake_rows(x), _fake_rows(x), _fake_stats(x, normalized_shape)))
def add_rms_norm_op(x: torch.Tensor, residual: torch.Tensor, normalized_shape: list[int],
                    weight: Optional[torch.Tensor], eps: float
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(y, h, rstd): rms_norm of h = x + residual, and h."""
    y, h, _, rstd = _forward(x, residual, weight, None, normalized_shape, eps, True)
    return y, h, rstd


def _fake_backward(x, weight, mean, rstd, dy, dres, n_cols, need_dw, need_db):
    n_sums = int(need_dw) + int(need_db)
    return (_fake_rows(x),
            torch.empty((n_sums, n_cols), dtype=acc_torch_dtype(x.dtype), device=x.device))


@kernel_op("norm_backward", _fake_backward)
def norm_backward_op(x: torch.Tensor, weight: Optional[torch.Tensor], mean: Optional[torch.Tensor],
                     rstd: torch.Tensor, dy: torch.Tensor, dres: Optional[torch.Tensor],
                     n_cols: int, need_dw: bool, need_db: bool
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, sums) of any of the four norms over rows of n_cols: x is what was normalised (h
    when fused), mean is None for RMSNorm, dres the new residual's gradient when fused (added
    to dx); sums holds dw (if need_dw) then db (if need_db), a row each in the accumulation
    dtype."""
    x2d, dy2d = rows_of(x, n_cols), rows_of(dy, n_cols)
    dres2d = rows_of(dres, n_cols) if dres is not None else None
    w = weight.reshape(-1) if weight is not None else None
    dx, sums = _norm_bwd_sums(x2d, w, mean, rstd, dy2d, dres2d, need_dw, need_db, mean is None)
    return dx.view(x.shape), sums


def _setup(ctx, x, normalized_shape, weight, bias, mean, rstd) -> None:
    ctx.n_cols = _n_cols(normalized_shape)
    ctx.bias_like = (bias.dtype, bias.shape) if bias is not None else None
    ctx.save_for_backward(x, weight, mean, rstd)


def _backward(ctx, dy, dh, w_index: int, b_index: int | None):
    x, weight, mean, rstd = ctx.saved_tensors
    need_dw = ctx.needs_input_grad[w_index]
    need_db = b_index is not None and ctx.needs_input_grad[b_index]
    dx, sums = norm_backward_op(x, weight, mean, rstd, dy, dh, ctx.n_cols, need_dw, need_db)
    dw = sums[0].to(weight.dtype).view(weight.shape) if need_dw else None
    db = sums[-1].to(ctx.bias_like[0]).view(ctx.bias_like[1]) if need_db else None
    return dx, dw, db


def _setup_layer_norm(ctx, inputs, output) -> None:
    x, shape, weight, bias, _ = inputs
    _, mean, rstd = output
    ctx.mark_non_differentiable(mean, rstd)
    _setup(ctx, x, shape, weight, bias, mean, rstd)


def _backward_layer_norm(ctx, dy, _dmean, _drstd):
    dx, dw, db = _backward(ctx, dy, None, 2, 3)
    return dx, None, dw, db, None


def _setup_rms_norm(ctx, inputs, output) -> None:
    x, shape, weight, _ = inputs
    _, rstd = output
    ctx.mark_non_differentiable(rstd)
    _setup(ctx, x, shape, weight, None, None, rstd)


def _backward_rms_norm(ctx, dy, _drstd):
    dx, dw, _ = _backward(ctx, dy, None, 2, None)
    return dx, None, dw, None


def _setup_add_layer_norm(ctx, inputs, output) -> None:
    _, _, shape, weight, bias, _ = inputs
    _, h, mean, rstd = output
    ctx.mark_non_differentiable(mean, rstd)
    # The fused variant normalises h, which it returns anyway: saving it costs nothing.
    _setup(ctx, h, shape, weight, bias, mean, rstd)


def _backward_add_layer_norm(ctx, dy, dh, _dmean, _drstd):
    dx, dw, db = _backward(ctx, dy, dh, 3, 4)
    return dx, dx, None, dw, db, None


def _setup_add_rms_norm(ctx, inputs, output) -> None:
    _, _, shape, weight, _ = inputs
    _, h, rstd = output
    ctx.mark_non_differentiable(rstd)
    _setup(ctx, h, shape, weight, None, None, rstd)


def _backward_add_rms_norm(ctx, dy, dh, _drstd):
    dx, dw, _ = _backward(ctx, dy, dh, 3, None)
    return dx, dx, None, dw, None


layer_norm_op.register_autograd(_backward_layer_norm, setup_context=_setup_layer_norm)
rms_norm_op.register_autograd(_backward_rms_norm, setup_context=_setup_rms_norm)
add_layer_norm_op.register_autograd(_backward_add_layer_norm, setup_context=_setup_add_layer_norm)
add_rms_norm_op.register_autograd(_backward_add_rms_norm, setup_context=_setup_add_rms_norm)
