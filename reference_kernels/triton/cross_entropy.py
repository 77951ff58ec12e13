"""Cross-entropy over large vocabularies, forward and backward, chunked over the vocab.

The forward streams each row of logits once (block-wise online max/sum) and keeps a float32
log-sum-exp per row; no (rows, vocab) probability or log-probability tensor is ever built.
The backward streams the row again and writes the gradient: logits are read twice in
total and the only (rows, vocab) allocation is the gradient itself.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from reference_kernels.triton._common import (
    acc_torch_dtype, acc_type, cdiv, check_same_device, check_tensor, ints, next_power_of_2,
    num_warps_for, sm_count)
from reference_kernels.triton._ops import kernel_op, launcher

MAX_BLOCK_COLS = 8192
# Forward: one program per row when the rows alone fill the GPU (measured on an H200 at
# 16384x8192: 0.99 of copy bandwidth in fp32, where 4-16 KiB chunks plus a merge kernel gave
# 0.89-0.94); only short batches split rows into chunks of >= FWD_MIN_CHUNK_BYTES.
FWD_PROGRAMS_PER_SM = 8
FWD_MIN_CHUNK_BYTES = 16384
FWD_BYTES_PER_THREAD = 128  # 8 x 16-byte loads in flight per thread and block
FWD_BLOCK_BYTES = 16384  # logits per block of the one-program-per-row forward
REDUCTIONS = ("mean", "sum", "none")


@triton.jit
def _load_block(x_row, block_start, n_cols, ACC: tl.constexpr, BLOCK_N: tl.constexpr,
                GROUP: tl.constexpr, EVICT: tl.constexpr):
    # A [BLOCK_N/GROUP, GROUP] tile: each thread holds GROUP contiguous logits (16 bytes).
    idx = block_start + tl.arange(0, BLOCK_N // GROUP)[:, None] * GROUP + \
        tl.arange(0, GROUP)[None, :]
    return tl.load(x_row + idx, mask=idx < n_cols, other=-float("inf"),
                   eviction_policy=EVICT).to(ACC)


@triton.jit
def _block_max_sumexp(x, THREADS: tl.constexpr):
    # (max, sum exp(x - max)) of a loaded [BLOCK_N/GROUP, GROUP] tile. Tile row r*THREADS + t
    # is thread t's r-th 16-byte vector (Triton's blocked layout for the load), so the
    # reshape to [R, THREADS, GROUP] moves no data and each thread shifts its own logits by
    # their max: one exp per logit plus one per thread, no block-wide max (two barriers)
    # between loads and exps, and every exp waits on all of the thread's loads, so ptxas
    # issues them all before the first exp instead of interleaving loads with the exps.
    # Exps are exp2(x*log2(e) - max*log2(e)): one FMA + one ex2 per logit.
    # NB: rounding max*log2(e) shifts the result by ~1 ulp of max, as the subtraction would.
    # NB: any tile-row-to-thread assignment gives the same sums; only speed relies on it.
    ROWS: tl.constexpr = x.shape[0]
    T: tl.constexpr = THREADS if ROWS >= THREADS else ROWS
    x3 = tl.reshape(x, [ROWS // T, T, x.shape[1]])
    m_t = tl.max(tl.max(x3, axis=2), axis=0)  # within a thread
    shift_t = tl.where(m_t == -float("inf"), 0.0, m_t)
    s_t = tl.sum(tl.sum(tl.exp2(x3 * 1.4426950408889634
                                - (shift_t * 1.4426950408889634)[None, :, None]), axis=2),
                 axis=0)
    m = tl.max(m_t, axis=0)
    shift = tl.where(m == -float("inf"), 0.0, m)
    # threads with only -inf add 0, never 0 * exp2(+big) = NaN
    s_t = tl.where(m_t == -float("inf"), 0.0,
                   s_t * tl.exp2(m_t * 1.4426950408889634 - shift * 1.4426950408889634))
    return m, tl.sum(s_t, axis=0)


@triton.jit
def _merge_max_sumexp(m1, s1, m2, s2):
    m = tl.maximum(m1, m2)
    shift = tl.where(m == -float("inf"), 0.0, m)
    return m, s1 * tl.exp(m1 - shift) + s2 * tl.exp(m2 - shift)


@triton.jit
def _row_max_sumexp(x_row, x_first, start, stop, n_cols, ACC: tl.constexpr,
                    BLOCK_N: tl.constexpr, GROUP: tl.constexpr, THREADS: tl.constexpr,
                    EVICT: tl.constexpr, STAGES: tl.constexpr):
    # (max, sum exp(x - max)) of x_row[start:stop], whose first block the caller loaded
    # (x_first); stop - start is a multiple of BLOCK_N or ends at n_cols.
    m, s = _block_max_sumexp(x_first, THREADS)
    # STAGES > 1: cp.async copies the next STAGES - 1 blocks into shared memory meanwhile
    for block_start in tl.range(start + BLOCK_N, stop, BLOCK_N, num_stages=STAGES):
        m_b, s_b = _block_max_sumexp(_load_block(x_row, block_start, n_cols, ACC, BLOCK_N,
                                                 GROUP, EVICT), THREADS)
        m, s = _merge_max_sumexp(m, s, m_b, s_b)
    return m, s


@triton.jit
def _target_logit(logits_ptr, target_ptr, rows, live, n_cols, row_stride, ignore_index):
    # (x[target], ignored, valid) per row: reads one target and one logit.
    target = tl.load(target_ptr + rows, mask=live, other=ignore_index).to(tl.int64)
    ignored = target == ignore_index
    valid = (target >= 0) & (target < n_cols)
    x_target = tl.load(logits_ptr + rows * row_stride + target, mask=live & valid & ~ignored,
                       other=0.0)
    return x_target, ignored, valid


@triton.jit
def _ce_store(loss_ptr, lse_ptr, rows, live, lse, x_target, ignored, valid):
    # Loss = lse - x[target], NaN for an out-of-range target, 0 for ignored rows; 8 bytes.
    loss = tl.where(valid, lse - x_target.to(lse.dtype), float("nan"))
    tl.store(loss_ptr + rows, tl.where(ignored, 0.0, loss), mask=live)
    tl.store(lse_ptr + rows, lse, mask=live)


@triton.jit
def _ce_fwd_row(logits_ptr, target_ptr, loss_ptr, lse_ptr, n_cols, row_stride, ignore_index,
                ACC: tl.constexpr, BLOCK_N: tl.constexpr, GROUP: tl.constexpr,
                THREADS: tl.constexpr, EVICT: tl.constexpr, STAGES: tl.constexpr,
                ONE_BLOCK: tl.constexpr):
    # One program per row (the whole row is one chunk): reads n_cols*elt bytes of logits.
    # The target logit's two dependent loads (target, then x[target]) come first in program
    # order: ptxas otherwise issues them after the exps, where they trail the row. ONE_BLOCK
    # rows skip the block loop, whose mere presence costs 8 registers (a program per SM).
    row = tl.program_id(0).to(tl.int64)
    x_row = logits_ptr + row * row_stride
    x_target, ignored, valid = _target_logit(logits_ptr, target_ptr, row, row >= 0, n_cols,
                                             row_stride, ignore_index)
    x_first = _load_block(x_row, 0, n_cols, ACC, BLOCK_N, GROUP, EVICT)
    if ONE_BLOCK:
        m, s = _block_max_sumexp(x_first, THREADS)
    else:
        m, s = _row_max_sumexp(x_row, x_first, 0, n_cols, n_cols, ACC, BLOCK_N, GROUP,
                               THREADS, EVICT, STAGES)
    _ce_store(loss_ptr, lse_ptr, row, row >= 0, m + tl.log(s), x_target, ignored, valid)


@triton.jit
def _ce_fwd_chunk(logits_ptr, target_ptr, part_ptr, arrived_ptr, loss_ptr, lse_ptr, n_cols,
                  row_stride, n_chunks, ignore_index, ACC: tl.constexpr, BLOCK_N: tl.constexpr,
                  GROUP: tl.constexpr, THREADS: tl.constexpr, EVICT: tl.constexpr,
                  STAGES: tl.constexpr, CHUNK_N: tl.constexpr, CHUNKS: tl.constexpr):
    # Program (row, chunk) reads CHUNK_N*elt bytes of logits and writes its (max, sum-exp)
    # pair (8 bytes); the row's last program to arrive merges the n_chunks pairs and writes
    # the loss, so short batches need one launch, not a partial and a merge kernel.
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    start = chunk * CHUNK_N
    stop = tl.minimum(start + CHUNK_N, n_cols)
    x_row = logits_ptr + row * row_stride
    m, s = _row_max_sumexp(x_row, _load_block(x_row, start, n_cols, ACC, BLOCK_N, GROUP, EVICT),
                           start, stop, n_cols, ACC, BLOCK_N, GROUP, THREADS, EVICT, STAGES)
    pair = part_ptr + (row * n_chunks + chunk) * 2
    tl.store(pair, m)
    tl.store(pair + 1, s)
    tl.debug_barrier()  # the pair is written before the arrival below publishes it
    if tl.atomic_add(arrived_ptr + row, 1, sem="acq_rel", scope="gpu") == n_chunks - 1:
        chunks = tl.arange(0, CHUNKS)
        pairs = part_ptr + (row * n_chunks + chunks) * 2
        mine = chunks < n_chunks
        # .cg: read from L2, where the other programs' pairs are, never a stale L1 line
        m_c = tl.load(pairs, mask=mine, other=-float("inf"), cache_modifier=".cg")
        s_c = tl.load(pairs + 1, mask=mine, other=0.0, cache_modifier=".cg")
        row_max = tl.max(m_c, axis=0)
        shift = tl.where(row_max == -float("inf"), 0.0, row_max)
        lse = row_max + tl.log(tl.sum(s_c * tl.exp(m_c - shift), axis=0))
        x_target, ignored, valid = _target_logit(logits_ptr, target_ptr, row, row >= 0,
                                                 n_cols, row_stride, ignore_index)
        _ce_store(loss_ptr, lse_ptr, row, row >= 0, lse, x_target, ignored, valid)


@triton.jit
def _ce_bwd(logits_ptr, target_ptr, lse_ptr, scale_ptr, grad_ptr, n_cols, row_stride,
            scale_stride, ignore_index, ACC: tl.constexpr, BLOCK_N: tl.constexpr):
    # dlogits = scale_row*(softmax(x) - onehot(target)), 0 for ignored rows.
    # Reads n_cols*elt (logits) and writes n_cols*elt (gradient) per row.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    target = tl.load(target_ptr + row).to(tl.int64)
    lse = tl.load(lse_ptr + row)
    scale = tl.load(scale_ptr + row * scale_stride).to(ACC)
    scale = tl.where(target == ignore_index, 0.0, scale)
    for start in range(0, n_cols, BLOCK_N):
        idx = start + cols
        mask = idx < n_cols
        x = tl.load(logits_ptr + row * row_stride + idx, mask=mask, other=0.0).to(ACC)
        g = (tl.exp(x - lse) - tl.where(idx == target, 1.0, 0.0)) * scale
        tl.store(grad_ptr + row * n_cols + idx, g.to(grad_ptr.dtype.element_ty), mask=mask)


def _block_cols(n_cols: int) -> int:
    return min(next_power_of_2(n_cols), MAX_BLOCK_COLS)


def _fwd_chunks(n_rows: int, n_cols: int, elt_bytes: int, device: torch.device) -> int:
    if device.type == "cuda":
        target = sm_count(device) * FWD_PROGRAMS_PER_SM
    else:
        target = 4  # the interpreter: enough to exercise the chunked path on short batches
    if n_rows >= target:
        return 1
    return max(1, min(cdiv(target, n_rows),
                      cdiv(n_cols * elt_bytes, FWD_MIN_CHUNK_BYTES)))


@dataclass(frozen=True)
class FwdConfig:
    """Launch of the one-program-per-row forward (when the rows alone fill the GPU): columns
    per block, warps, contiguous logits per thread and load (GROUP: one 16-byte vector), and
    whether the logits are loaded evict-first.

    NB: measured on an H200 at 16384x8192 in bf16 (benchmarks/studies/explore_ce_forward.py,
    do_bench with its L2 flush / back-to-back without it), share of copy: one max per 16-byte
    vector with its sum rescaled by one more exp (the previous kernel) 0.83-0.88 / 0.89-0.90;
    one max per thread over all its vectors, inside the block loop 0.83-0.85 / 0.89; without the
    loop for one-block rows (80 -> 72 registers, 7 programs per SM) 0.89-0.90 / 0.97-0.99;
    target logit first 0.89-0.91 / 0.99-1.01; evict-first loads 0.91-0.94 / 1.00-1.04. A kernel
    that only sums the rows: 0.90-0.92 / 1.01-1.05. Evict-first matters only with dirty lines in
    L2 (do_bench's flush buffer; in training, the LM head's output): normal loads evict them,
    paying their write-back inside this kernel. Lost: 2 or 4 rows per program (0.44-0.74),
    persistent programs looping over rows with or without cp.async (0.72-0.83), x[target] in
    every thread's max (no better: 0.85-0.93), a second launch for the target logit (0.84-0.89),
    a register cap of 64 or 56 (0.61, 0.41), .cg loads (0.84-0.90); 8 warps 0.87-0.96 (noisy).
    fp32 reaches 0.99-1.01.
    """

    block_n: int
    num_warps: int
    group: int
    evict_first: bool = True
    stages: int = 1


@functools.lru_cache(maxsize=1024)
def fwd_config(n_cols: int, dtype: torch.dtype) -> FwdConfig:
    # Blocks of FWD_BLOCK_BYTES (8192 bf16, 4096 fp32 logits): measured on an H200, fp32
    # 4096 x 4 warps 0.99 of copy against 0.95-0.98 for 8192 x 8.
    block = min(next_power_of_2(n_cols), FWD_BLOCK_BYTES // dtype.itemsize)
    return FwdConfig(block, _fwd_warps(block, dtype.itemsize), _group(block, dtype.itemsize),
                     _evict_first(dtype.itemsize))


def _evict_first(elt_bytes: int) -> bool:
    # NB: 16-bit logits only: fp32 lost with it (0.96-0.97 of copy against 1.01 at
    # 16384x8192, tune_rowwise.py), bf16 gained (0.91-0.94 against 0.89-0.91).
    return elt_bytes < 4


def _group(block_cols: int, elt_bytes: int) -> int:
    # One 16-byte vector of logits per max: 8 bf16/fp16, 4 fp32.
    return min(block_cols, 16 // elt_bytes)


def _fwd_warps(block_cols: int, elt_bytes: int) -> int:
    # Measured on an H200: 4 warps for a 16 KiB block (bf16: 0.86-0.87 of copy against
    # 0.82-0.83 with 8, 0.82-0.86 with 2): a streaming reduction wants more resident programs
    # per SM rather than more warps per program.
    warps = block_cols * elt_bytes // (32 * FWD_BYTES_PER_THREAD)
    return max(1, min(16, next_power_of_2(max(warps, 1))))


def cross_entropy_fwd(logits2d: torch.Tensor, target: torch.Tensor, ignore_index: int,
                      config: FwdConfig | None = None):
    """Per-row losses (0 for ignored rows) and per-row log-sum-exp, in the accumulation dtype."""
    n_rows, n_cols = ints(*logits2d.shape)
    acc_dtype = acc_torch_dtype(logits2d.dtype)
    losses = torch.empty(n_rows, dtype=acc_dtype, device=logits2d.device)
    lse = torch.empty(n_rows, dtype=acc_dtype, device=logits2d.device)
    if n_rows:
        _launch_fwd(logits2d, target, losses, lse, ignore_index, config)
    return losses, lse


def _launch_fwd(logits2d, target, losses, lse, ignore_index: int,
                config: FwdConfig | None) -> None:
    n_rows, n_cols, row_stride = ints(*logits2d.shape, logits2d.stride(0))
    acc, elt_bytes = acc_type(logits2d.dtype), logits2d.element_size()
    chunks = _chunk_plan(n_rows, n_cols, elt_bytes, logits2d.device)
    if chunks is None:
        config = config or fwd_config(n_cols, logits2d.dtype)
        launcher(_ce_fwd_row)[(n_rows,)](
            logits2d, target, losses, lse, n_cols, row_stride, ignore_index, ACC=acc,
            BLOCK_N=config.block_n, GROUP=config.group, THREADS=32 * config.num_warps,
            EVICT=_policy(config.evict_first), STAGES=config.stages,
            ONE_BLOCK=n_cols <= config.block_n, num_warps=config.num_warps)
        return
    # One (max, sum-exp) pair per chunk: 8*n_chunks bytes per row (at most 8*1056 = 8448 B
    # on an H200, against >= 16 KiB of logits per chunk) and an arrival count per row.
    pairs = torch.empty((n_rows, chunks.n_chunks, 2), dtype=lse.dtype, device=lse.device)
    arrived = torch.zeros(n_rows, dtype=torch.int32, device=lse.device)
    launcher(_ce_fwd_chunk)[(n_rows, chunks.n_chunks)](
        logits2d, target, pairs, arrived, losses, lse, n_cols, row_stride,
        chunks.n_chunks, ignore_index, ACC=acc, BLOCK_N=chunks.block, GROUP=chunks.group,
        THREADS=32 * chunks.warps, EVICT=_policy(_evict_first(elt_bytes)), STAGES=1,
        CHUNK_N=chunks.chunk_cols, CHUNKS=next_power_of_2(chunks.n_chunks),
        num_warps=chunks.warps)


@dataclass(frozen=True)
class ChunkPlan:
    """Launch of the chunked forward (short batches): chunks per row, columns per chunk and
    per block, warps, logits per 16-byte load."""

    n_chunks: int
    chunk_cols: int
    block: int
    warps: int
    group: int


@functools.lru_cache(maxsize=1024)
def _chunk_plan(n_rows: int, n_cols: int, elt_bytes: int,
                device: torch.device) -> ChunkPlan | None:
    """None when one program per row fills the device (the one-row forward)."""
    n_chunks = _fwd_chunks(n_rows, n_cols, elt_bytes, device)
    if n_chunks == 1:
        return None
    block = _block_cols(cdiv(n_cols, n_chunks))
    chunk_cols = cdiv(cdiv(n_cols, n_chunks), block) * block
    return ChunkPlan(cdiv(n_cols, chunk_cols), chunk_cols, block,
                     _fwd_warps(block, elt_bytes), _group(block, elt_bytes))


def _policy(evict_first: bool) -> str:
    return "evict_first" if evict_first else ""


def cross_entropy_bwd(logits2d, target, lse, row_scale: torch.Tensor,
                      ignore_index: int) -> torch.Tensor:
    """dlogits; row_scale holds d(loss)/d(row loss) per row (stride 0 when shared)."""
    n_rows, n_cols = ints(*logits2d.shape)
    grad = torch.empty((n_rows, n_cols), dtype=logits2d.dtype, device=logits2d.device)
    if grad.numel():
        block = _block_cols(n_cols)
        launcher(_ce_bwd)[(n_rows,)](
            logits2d, target, lse, row_scale, grad, n_cols,
            *ints(logits2d.stride(0), row_scale.stride(0)), ignore_index,
            ACC=acc_type(logits2d.dtype), BLOCK_N=block, num_warps=num_warps_for(block))
    return grad


def _fake_forward(logits, target, ignore_index, reduction):
    n_rows = logits.shape[0]
    loss_shape = (n_rows,) if reduction == "none" else ()
    return (torch.empty(loss_shape, dtype=logits.dtype, device=logits.device),
            torch.empty(n_rows, dtype=acc_torch_dtype(logits.dtype), device=logits.device))


@kernel_op("cross_entropy", _fake_forward)
def cross_entropy_op(logits: torch.Tensor, target: torch.Tensor, ignore_index: int,
                     reduction: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss, per-row log-sum-exp) for unit-stride (rows, vocab) logits; validated by the caller."""
    losses, lse = cross_entropy_fwd(logits, target, ignore_index)
    if reduction == "none":
        return losses.to(logits.dtype), lse
    total = losses.sum()  # a fixed-order torch reduction: bitwise reproducible
    if reduction == "sum":
        return total.to(logits.dtype), lse
    # NB: as torch, mean over the rows that are not ignored; 0/0 = NaN when all are.
    return (total / _valid_rows(target, ignore_index, total.dtype)).to(logits.dtype), lse


def _valid_rows(target: torch.Tensor, ignore_index: int, dtype: torch.dtype) -> torch.Tensor:
    return (target != ignore_index).sum().to(dtype)


@kernel_op("cross_entropy_backward",
           lambda logits, target, lse, row_scale, ignore_index: torch.empty(
               logits.shape, dtype=logits.dtype, device=logits.device))
def cross_entropy_backward_op(logits: torch.Tensor, target: torch.Tensor, lse: torch.Tensor,
                              row_scale: torch.Tensor, ignore_index: int) -> torch.Tensor:
    """dlogits; row_scale holds d(loss)/d(row loss) per row (a stride-0 view when shared)."""
    return cross_entropy_bwd(logits, target, lse, row_scale, ignore_index)


def _setup(ctx, inputs, output) -> None:
    logits, target, ignore_index, reduction = inputs
    _, lse = output
    ctx.mark_non_differentiable(lse)
    ctx.ignore_index, ctx.reduction = ignore_index, reduction
    ctx.save_for_backward(logits, target, lse)


def _backward(ctx, grad_loss: torch.Tensor, _grad_lse):
    logits, target, lse = ctx.saved_tensors
    n_rows = logits.shape[0]
    if ctx.reduction == "none":
        row_scale = grad_loss
    elif ctx.reduction == "sum":
        row_scale = grad_loss.reshape(1).expand(n_rows)
    else:
        n_valid = _valid_rows(target, ctx.ignore_index, lse.dtype)
        row_scale = (grad_loss.to(lse.dtype) / n_valid).reshape(1).expand(n_rows)
    grad = cross_entropy_backward_op(logits, target, lse, row_scale, ctx.ignore_index)
    return grad, None, None, None


cross_entropy_op.register_autograd(_backward, setup_context=_setup)


def cross_entropy(logits: torch.Tensor, target: torch.Tensor, ignore_index: int = -100,
                  reduction: str = "mean") -> torch.Tensor:
    """torch.nn.functional.cross_entropy for (rows, vocab) logits and (rows,) class targets.

    Out-of-range targets (other than ignore_index) give a NaN loss instead of a device assert.
    """
    check_tensor("cross_entropy", "logits", logits)
    check_tensor("cross_entropy", "target", target, dtypes=(torch.int64, torch.int32))
    check_same_device("cross_entropy", logits, target)
    if logits.dim() != 2 or target.dim() != 1 or target.shape[0] != logits.shape[0]:
        raise ValueError(f"cross_entropy: expects logits (rows, vocab) and target (rows,), got "
                         f"{list(logits.shape)} and {list(target.shape)}; reshape with "
                         "logits.view(-1, vocab), target.view(-1)")
    if logits.shape[1] == 0:
        raise ValueError("cross_entropy: logits have an empty class dimension")
    if reduction not in REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    return cross_entropy_op(logits, target.contiguous(), int(ignore_index), reduction)[0]
