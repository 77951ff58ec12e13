"""Cross-entropy over large vocabularies, forward and backward, chunked over the vocab.

The forward streams each row of logits once (online max/sum) and keeps only a float32
log-sum-exp per row; no (rows, vocab) probability or log-probability tensor is ever built.
The backward streams the row again and writes the gradient: logits are read twice in
total and the only (rows, vocab) allocation is the gradient itself.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_kernels.triton._common import (
    acc_torch_dtype, acc_type, check_same_device, check_tensor, num_warps_for, online_update,
)

MAX_BLOCK_COLS = 8192
REDUCTIONS = ("mean", "sum", "none")


@triton.jit
def _ce_fwd(logits_ptr, target_ptr, loss_ptr, lse_ptr, n_cols, row_stride, ignore_index,
            ACC: tl.constexpr, BLOCK_N: tl.constexpr):
    # One row per program: reads n_cols*elt bytes of logits and one target, writes two
    # floats (loss, log-sum-exp). Rows with an out-of-range target get a NaN loss.
    row = tl.program_id(0).to(tl.int64)
    x_row = logits_ptr + row * row_stride
    # The target logit first: its two dependent loads overlap the row's stream.
    target = tl.load(target_ptr + row).to(tl.int64)
    ignored = target == ignore_index
    valid = (target >= 0) & (target < n_cols)
    x_target = tl.load(x_row + target, mask=valid & (target != ignore_index), other=0.0).to(ACC)
    cols = tl.arange(0, BLOCK_N)
    m = tl.full([BLOCK_N], -float("inf"), ACC)
    s = tl.zeros([BLOCK_N], ACC)
    for start in range(0, n_cols, BLOCK_N):
        x = tl.load(x_row + start + cols, mask=start + cols < n_cols,
                    other=-float("inf")).to(ACC)
        m, s = online_update(m, s, x)
    row_max = tl.max(m, axis=0)
    shift = tl.where(row_max == -float("inf"), 0.0, row_max)
    lse = row_max + tl.log(tl.sum(s * tl.exp(m - shift), axis=0))
    loss = tl.where(valid, lse - x_target, float("nan"))
    tl.store(loss_ptr + row, tl.where(ignored, 0.0, loss))
    tl.store(lse_ptr + row, lse)


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
    return min(triton.next_power_of_2(n_cols), MAX_BLOCK_COLS)


def cross_entropy_fwd(logits2d: torch.Tensor, target: torch.Tensor, ignore_index: int):
    """Per-row losses (0 for ignored rows) and per-row log-sum-exp, in the accumulation dtype."""
    n_rows, n_cols = logits2d.shape
    acc_dtype = acc_torch_dtype(logits2d.dtype)
    losses = torch.empty(n_rows, dtype=acc_dtype, device=logits2d.device)
    lse = torch.empty(n_rows, dtype=acc_dtype, device=logits2d.device)
    if n_rows:
        block = _block_cols(n_cols)
        _ce_fwd[(n_rows,)](logits2d, target, losses, lse, n_cols, logits2d.stride(0),
                           ignore_index, ACC=acc_type(logits2d.dtype), BLOCK_N=block,
                           num_warps=num_warps_for(block))
    return losses, lse


def cross_entropy_bwd(logits2d, target, lse, row_scale: torch.Tensor,
                      ignore_index: int) -> torch.Tensor:
    """dlogits; row_scale holds d(loss)/d(row loss) per row (stride 0 when shared)."""
    n_rows, n_cols = logits2d.shape
    grad = torch.empty((n_rows, n_cols), dtype=logits2d.dtype, device=logits2d.device)
    if grad.numel():
        block = _block_cols(n_cols)
        _ce_bwd[(n_rows,)](logits2d, target, lse, row_scale, grad, n_cols, logits2d.stride(0),
                           row_scale.stride(0), ignore_index, ACC=acc_type(logits2d.dtype),
                           BLOCK_N=block, num_warps=num_warps_for(block))
    return grad


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, ignore_index: int, reduction: str):
        losses, lse = cross_entropy_fwd(logits, target, ignore_index)
        ctx.save_for_backward(logits, target, lse)
        ctx.ignore_index, ctx.reduction = ignore_index, reduction
        if reduction == "none":
            return losses.to(logits.dtype)
        total = losses.sum()  # a fixed-order torch reduction: bitwise reproducible
        if reduction == "sum":
            return total.to(logits.dtype)
        # NB: as torch, mean over the rows that are not ignored; 0/0 = NaN when all are.
        ctx.n_valid = (target != ignore_index).sum().to(total.dtype)
        return (total / ctx.n_valid).to(logits.dtype)

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        logits, target, lse = ctx.saved_tensors
        n_rows = logits.shape[0]
        if ctx.reduction == "none":
            row_scale = grad_out.contiguous()
        elif ctx.reduction == "sum":
            row_scale = grad_out.reshape(1).expand(n_rows)
        else:
            row_scale = (grad_out.to(ctx.n_valid.dtype) / ctx.n_valid).reshape(1).expand(n_rows)
        grad = cross_entropy_bwd(logits, target, lse, row_scale, ctx.ignore_index)
        return grad, None, None, None


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
    return _CrossEntropy.apply(logits, target.contiguous(), int(ignore_index), reduction)
