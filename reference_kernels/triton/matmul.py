"""A plain tiled fp16/bf16 matmul (tl.dot, float32 accumulation) with a few autotune configs.

It is here to be beaten: on Hopper cuBLAS (wgmma, TMA, persistent schedules) wins, and
`advisor try-kernel` shows by how much. No backward: it never replaces a trained matmul.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl

from reference_kernels.triton._common import cdiv, check_same_device, check_tensor, INTERPRETED, ints
from reference_kernels.triton._ops import kernel_op, launcher

MATMUL_DTYPES = (torch.float16, torch.bfloat16)

# From the Triton matmul tutorial's fp16 list, trimmed to the ones that win on A100/H100.
_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8},
                  num_stages=3, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8},
                  num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8},
                  num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8},
                  num_stages=5, num_warps=2),
]
# The interpreter runs one fixed small tile: autotuning there would time numpy.
_INTERPRETER_TILE = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 4}


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                   stride_cm, stride_cn, DOT_IN_FP32: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):
    # C = A @ B. Each program reads K*(BLOCK_M + BLOCK_N)*elt bytes and writes
    # BLOCK_M*BLOCK_N*elt; GROUP_M-row supergroups keep B tiles hot in L2.
    pid = tl.program_id(0)
    grid_m = tl.cdiv(M, BLOCK_M)
    grid_n = tl.cdiv(N, BLOCK_N)
    group_size = GROUP_M * grid_n
    first_m = (pid // group_size) * GROUP_M
    rows_in_group = tl.minimum(grid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % group_size) % rows_in_group
    pid_n = (pid % group_size) // rows_in_group
    # Out-of-range rows/cols wrap (% M, % N) to valid addresses; their results are not stored.
    offs_m = ((pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M).to(tl.int64)
    offs_n = ((pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N).to(tl.int64)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if DOT_IN_FP32:
            # NB: the CPU interpreter's bf16 dot is wrong (triton 3.9); products of bf16/fp16
            # values are exact in float32, so this changes nothing but the speed.
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    c_ptrs = c_ptr + rows.to(tl.int64)[:, None] * stride_cm + cols[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(rows[:, None] < M) & (cols[None, :] < N))


_matmul_autotuned = triton.autotune(configs=_CONFIGS, key=["M", "N", "K"])(_matmul_kernel)


@kernel_op("matmul", lambda a, b: torch.empty((a.shape[0], b.shape[1]), dtype=a.dtype,
                                              device=a.device))
def matmul_op(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """C = A @ B for validated (M, K) and (K, N) operands; no autograd formula."""
    M, K, N = ints(*a.shape, b.shape[1])
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    if c.numel() == 0:
        return c
    if K == 0:
        return c.zero_()
    args = (a, b, c, M, N, K, *ints(a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                    c.stride(0), c.stride(1)))
    if INTERPRETED:
        t = _INTERPRETER_TILE
        grid = (cdiv(M, t["BLOCK_M"]) * cdiv(N, t["BLOCK_N"]),)
        launcher(_matmul_kernel)[grid](*args, DOT_IN_FP32=True, **t)
    else:
        def grid(meta):
            return (cdiv(M, meta["BLOCK_M"]) * cdiv(N, meta["BLOCK_N"]),)
        launcher(_matmul_autotuned)[grid](*args, DOT_IN_FP32=False)
    return c


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.mm(a, b) for float16/bfloat16 a (M, K) and b (K, N), any strides."""
    check_tensor("matmul", "a", a, dtypes=MATMUL_DTYPES)
    check_tensor("matmul", "b", b, dtypes=(a.dtype,))
    check_same_device("matmul", a, b)
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul: expects a (M, K) and b (K, N), got {list(a.shape)} and "
                         f"{list(b.shape)}")
    return matmul_op(a, b)
