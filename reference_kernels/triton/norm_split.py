"""LayerNorm and RMSNorm for rows past MAX_FUSED_COLS: each row split over programs.

The in-register kernels (norm.py) hold a whole row in one program, up to 64K elements. Longer
rows go through rowsplit.py's two steps, forward and backward:

- forward: stats programs (row, segment) reduce their stretch to a mean and M2 (LayerNorm:
  per-lane Welford, lanes merged with Chan et al.'s pairwise formula) or a sum of squares
  (RMSNorm); apply programs (row, column block) merge the row's partials into (mean, rstd)
  and write y. The fused residual variants write h = x + residual in the stats step and
  normalise h as stored, as the in-register kernel does.
- backward: stats programs reduce sum(g*xhat) and sum(g) (g = w*dy); apply programs take one
  column block over a run of rows, so dw/db of that block stay in registers: one fp32
  partial row per run, summed by norm.py's _sum_partials.
"""
from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl

from reference_kernels.triton import rowsplit
from reference_kernels.triton._common import acc_torch_dtype, acc_type, cdiv, ints
from reference_kernels.triton._ops import launcher
from reference_kernels.triton.rowsplit import load_partials, row_and_cols, row_and_segment


@triton.jit
def _norm_split_stats(x_ptr, res_ptr, h_ptr, mean_part_ptr, m2_part_ptr, n_cols,
                      x_row_stride, res_row_stride, seg_cols, n_segs,
                      IS_RMS: tl.constexpr, HAS_RESIDUAL: tl.constexpr, ACC: tl.constexpr,
                      BLOCK: tl.constexpr):
    # Program (row, segment): reads seg_cols*elt of x [and of residual, writing seg_cols*elt
    # of h], writes 2 floats: the segment's mean and M2 (RMSNorm: its sum of squares).
    row, seg = row_and_segment(n_segs)
    cols = tl.arange(0, BLOCK)
    cnt = tl.zeros([BLOCK], ACC)  # per-lane Welford: count, mean, M2
    mu = tl.zeros([BLOCK], ACC)
    m2 = tl.zeros([BLOCK], ACC)
    for off in range(0, seg_cols, BLOCK):
        c = seg * seg_cols + off + cols
        mask = c < n_cols
        x = tl.load(x_ptr + row * x_row_stride + c, mask=mask, other=0.0).to(ACC)
        if HAS_RESIDUAL:
            x += tl.load(res_ptr + row * res_row_stride + c, mask=mask, other=0.0).to(ACC)
            h = x.to(h_ptr.dtype.element_ty)
            tl.store(h_ptr + row * n_cols + c, h, mask=mask)
            x = h.to(ACC)
        if IS_RMS:
            m2 += x * x
        else:
            # NB: a division per element (the lane's count); the loop stays memory-bound
            cnt += tl.where(mask, 1.0, 0.0)
            d = tl.where(mask, x - mu, 0.0)
            mu += d / tl.maximum(cnt, 1.0)
            m2 += d * (x - mu)
    if IS_RMS:
        tl.store(m2_part_ptr + row * n_segs + seg, tl.sum(m2, axis=0))
    else:
        seg_mean = tl.sum(cnt * mu, axis=0) / tl.sum(cnt, axis=0)
        dev = mu - seg_mean
        tl.store(mean_part_ptr + row * n_segs + seg, seg_mean)
        tl.store(m2_part_ptr + row * n_segs + seg, tl.sum(m2 + cnt * dev * dev, axis=0))


@triton.jit
def _row_mean_rstd(mean_part_ptr, m2_part_ptr, row, n_cols, seg_cols, n_segs, eps,
                   IS_RMS: tl.constexpr, ACC: tl.constexpr, SEGS: tl.constexpr):
    # Merges one row's partials (2*n_segs*4 bytes from L2): Chan et al.'s pairwise update,
    # all segments at once; segment j holds min(seg_cols, n_cols - j*seg_cols) columns.
    m2_j = load_partials(m2_part_ptr, row, n_segs, SEGS, 0.0)
    if IS_RMS:
        mean = 0.0
        var = tl.sum(m2_j, axis=0) / n_cols  # the mean square
    else:
        mean_j = load_partials(mean_part_ptr, row, n_segs, SEGS, 0.0)
        j = tl.arange(0, SEGS)
        n_j = tl.minimum(tl.maximum(n_cols - j * seg_cols, 0), seg_cols).to(ACC)
        mean = tl.sum(n_j * mean_j, axis=0) / n_cols
        dev = mean_j - mean
        var = tl.sum(m2_j + n_j * dev * dev, axis=0) / n_cols
    return mean, 1.0 / tl.sqrt(var + tl.cast(eps, ACC))  # fp32 or fp64 eps: see norm.py


@triton.jit
def _norm_split_apply(x_ptr, h_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, mean_part_ptr,
                      m2_part_ptr, n_cols, eps, x_row_stride, seg_cols, n_segs,
                      IS_RMS: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
                      HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr, ACC: tl.constexpr,
                      BLOCK: tl.constexpr, SEGS: tl.constexpr):
    # Program (row, column block): reads the row's partials (L2), BLOCK*elt of x (h when
    # fused) [and BLOCK*elt of weight/bias, L2], writes BLOCK*elt of y; the row's first block
    # also writes mean and rstd (4 or 8 bytes).
    row, cols = row_and_cols(n_cols, BLOCK)
    mean, rstd = _row_mean_rstd(mean_part_ptr, m2_part_ptr, row, n_cols, seg_cols, n_segs,
                                eps, IS_RMS, ACC, SEGS)
    if tl.program_id(0) % tl.cdiv(n_cols, BLOCK) == 0:
        if not IS_RMS:
            tl.store(mean_ptr + row, mean)
        tl.store(rstd_ptr + row, rstd)
    mask = cols < n_cols
    if HAS_RESIDUAL:
        x = tl.load(h_ptr + row * n_cols + cols, mask=mask, other=0.0).to(ACC)
    else:
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=0.0).to(ACC)
    y = (x - mean) * rstd
    if HAS_WEIGHT:
        y = y * tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
    if HAS_BIAS:
        y = y + tl.load(b_ptr + cols, mask=mask, other=0.0).to(ACC)
    tl.store(y_ptr + row * n_cols + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _norm_bwd_split_stats(x_ptr, w_ptr, mean_ptr, rstd_ptr, dy_ptr, c1_part_ptr, c2_part_ptr,
                          n_cols, x_row_stride, dy_row_stride, seg_cols, n_segs,
                          IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr, ACC: tl.constexpr,
                          BLOCK: tl.constexpr):
    # Program (row, segment): reads seg_cols*elt of x and of dy [and seg_cols*elt of weight,
    # L2], writes 2 floats: the segment's sum(g*xhat) and sum(g), g = w*dy.
    row, seg = row_and_segment(n_segs)
    cols = tl.arange(0, BLOCK)
    rstd = tl.load(rstd_ptr + row)
    mean = 0.0
    if not IS_RMS:
        mean = tl.load(mean_ptr + row)
    acc1 = tl.zeros([BLOCK], ACC)
    acc2 = tl.zeros([BLOCK], ACC)
    for off in range(0, seg_cols, BLOCK):
        c = seg * seg_cols + off + cols
        mask = c < n_cols
        x = tl.load(x_ptr + row * x_row_stride + c, mask=mask, other=0.0).to(ACC)
        g = tl.load(dy_ptr + row * dy_row_stride + c, mask=mask, other=0.0).to(ACC)
        if HAS_WEIGHT:
            g = g * tl.load(w_ptr + c, mask=mask, other=0.0).to(ACC)
        acc1 += g * ((x - mean) * rstd)  # masked lanes: g == 0
        acc2 += g
    tl.store(c1_part_ptr + row * n_segs + seg, tl.sum(acc1, axis=0))
    tl.store(c2_part_ptr + row * n_segs + seg, tl.sum(acc2, axis=0))


@triton.jit
def _norm_bwd_split_apply(x_ptr, w_ptr, mean_ptr, rstd_ptr, dy_ptr, dres_ptr, dx_ptr,
                          c1_part_ptr, c2_part_ptr, dw_ptr, db_ptr, n_rows, n_cols,
                          rows_per_run, x_row_stride, dy_row_stride, dres_row_stride, n_segs,
                          IS_RMS: tl.constexpr, HAS_WEIGHT: tl.constexpr,
                          NEED_DW: tl.constexpr, NEED_DB: tl.constexpr,
                          HAS_DRES: tl.constexpr, ACC: tl.constexpr, BLOCK: tl.constexpr,
                          SEGS: tl.constexpr):
    # Program (run of rows, column block): per row reads its 2*n_segs partials (L2) and
    # BLOCK*elt of x and dy [and dres], writes BLOCK*elt of dx; at the end writes the block's
    # dw/db partial rows (BLOCK*4 bytes each), which _sum_parts adds over the runs.
    # NB: ptxas -v, sm_90a, fp32 accumulation, LayerNorm with weight, dw and db: 158 registers,
    # no spills, so one 8-warp program per SM; the rows of a run are not pipelined (not
    # measured: benchmarks/studies/row_shapes.py times it at 4096x393216).
    n_blocks = tl.cdiv(n_cols, BLOCK)
    run = tl.program_id(0) // n_blocks
    cols = (tl.program_id(0) % n_blocks) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = 1.0
    if HAS_WEIGHT:
        w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(ACC)
    dw_acc = tl.zeros([BLOCK], ACC)
    db_acc = tl.zeros([BLOCK], ACC)
    for i in range(0, rows_per_run):
        # The last run may be short: its rows past the end read row n_rows - 1 (their dy is
        # masked to 0, so they add nothing to dw/db) and store nothing.
        r = run * rows_per_run + i
        row = tl.minimum(r, n_rows - 1).to(tl.int64)
        ok = cols < tl.where(r < n_rows, n_cols, 0)
        c1 = tl.sum(load_partials(c1_part_ptr, row, n_segs, SEGS, 0.0), axis=0) / n_cols
        rstd = tl.load(rstd_ptr + row)
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=ok, other=0.0).to(ACC)
        dy = tl.load(dy_ptr + row * dy_row_stride + cols, mask=ok, other=0.0).to(ACC)
        if IS_RMS:
            xhat = x * rstd
            dx = (dy * w) * rstd - xhat * (c1 * rstd)
        else:
            c2 = tl.sum(load_partials(c2_part_ptr, row, n_segs, SEGS, 0.0), axis=0) / n_cols
            xhat = (x - tl.load(mean_ptr + row)) * rstd
            dx = (dy * w) * rstd - (xhat * (c1 * rstd) + c2 * rstd)
        if HAS_DRES:
            dx += tl.load(dres_ptr + row * dres_row_stride + cols, mask=ok,
                          other=0.0).to(ACC)
        tl.store(dx_ptr + row * n_cols + cols, dx.to(dx_ptr.dtype.element_ty), mask=ok)
        if NEED_DW:
            dw_acc += dy * xhat
        if NEED_DB:
            db_acc += dy
    if NEED_DW:
        tl.store(dw_ptr + run * n_cols + cols, dw_acc, mask=mask)
    if NEED_DB:
        tl.store(db_ptr + run * n_cols + cols, db_acc, mask=mask)


def split_norm_fwd(x2d, residual2d, weight, bias, eps: float, is_rms: bool, y, h, mean, rstd):
    """Fills y [h], [mean], rstd for rows of any length (rowsplit.py's two steps)."""
    n_rows, n_cols = ints(*x2d.shape)
    config = rowsplit.split_for(n_rows, n_cols, x2d.device)
    acc = acc_type(x2d.dtype)
    part = torch.empty((2, n_rows, config.segments), dtype=acc_torch_dtype(x2d.dtype),
                       device=x2d.device)
    strides = ints(x2d.stride(0), residual2d.stride(0) if residual2d is not None else 0)
    flags = dict(IS_RMS=is_rms, HAS_RESIDUAL=residual2d is not None, ACC=acc,
                 BLOCK=config.block, num_warps=config.num_warps)
    launcher(_norm_split_stats)[rowsplit.stats_grid(n_rows, config)](
        x2d, residual2d, h, part[0], part[1], n_cols, *strides, config.seg_cols,
        config.segments, **flags)
    launcher(_norm_split_apply)[rowsplit.apply_grid(n_rows, n_cols, config)](
        x2d, h, weight, bias, y, mean, rstd, part[0], part[1], n_cols, eps, strides[0],
        config.seg_cols, config.segments, HAS_WEIGHT=weight is not None,
        HAS_BIAS=bias is not None, SEGS=config.segs_block, **flags)


@functools.lru_cache(maxsize=1024)
def bwd_runs(n_rows: int, n_cols: int, block: int, target: int) -> tuple[int, int]:
    """(rows per run, runs) of the backward apply step: enough runs that runs x column
    blocks reaches `target` programs; each run costs one dw/db partial row (n_cols*4 bytes)."""
    runs = max(1, min(n_rows, target // cdiv(n_cols, block)))
    per_run = cdiv(n_rows, runs)
    return per_run, cdiv(n_rows, per_run)


def split_norm_bwd(x2d, weight, mean, rstd, dy2d, dres2d, dx, need_dw: bool, need_db: bool,
                   is_rms: bool):
    """Fills dx; returns (parts, runs): dw then db partial rows, (n_sums, runs, n_cols)."""
    n_rows, n_cols = ints(*x2d.shape)
    dev, acc_dtype = x2d.device, acc_torch_dtype(x2d.dtype)
    config = rowsplit.split_for(n_rows, n_cols, dev)
    target = rowsplit.FORCE[1] if rowsplit.FORCE else rowsplit.target_programs(dev)
    per_run, runs = bwd_runs(n_rows, n_cols, config.block, target)
    n_sums = int(need_dw) + int(need_db)
    parts = torch.empty((n_sums, runs, n_cols), dtype=acc_dtype, device=dev)
    c = torch.empty((2, n_rows, config.segments), dtype=acc_dtype, device=dev)
    acc = acc_type(x2d.dtype)
    strides = ints(x2d.stride(0), dy2d.stride(0))
    launcher(_norm_bwd_split_stats)[rowsplit.stats_grid(n_rows, config)](
        x2d, weight, mean, rstd, dy2d, c[0], c[1], n_cols, *strides, config.seg_cols,
        config.segments, IS_RMS=is_rms, HAS_WEIGHT=weight is not None, ACC=acc,
        BLOCK=config.block, num_warps=config.num_warps)
    launcher(_norm_bwd_split_apply)[(runs * cdiv(n_cols, config.block),)](
        x2d, weight, mean, rstd, dy2d, dres2d, dx, c[0], c[1],
        parts[0] if need_dw else None, parts[n_sums - 1] if need_db else None,
        n_rows, n_cols, per_run, *strides,
        int(dres2d.stride(0)) if dres2d is not None else 0, config.segments,
        IS_RMS=is_rms, HAS_WEIGHT=weight is not None, NEED_DW=need_dw, NEED_DB=need_db,
        HAS_DRES=dres2d is not None, ACC=acc, BLOCK=config.block, SEGS=config.segs_block,
        num_warps=config.num_warps)
    return parts, runs
