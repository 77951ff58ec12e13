"""The bf16 cross-entropy forward variants that lost (issue 5), kept so the numbers in
reference_kernels/triton/cross_entropy.py's FwdConfig NB comment can be re-measured.

At 16384x8192 bf16 it times, as a share of the D2D copy (do_bench medians, L2 flushed):
the shipped kernel at its default, persistent programs looping over rows (with and without
cp.async stages), a per-thread max over all of a thread's logits, the shipped kernel without
the target logit, load cache modifiers / eviction hints, and read-only row sums (one row and
several rows per program, persistent, with cache hints).
Every variant that computes a loss is checked against the shipped kernel before it is timed.

    python benchmarks/explore_ce_forward.py --out DIR     (writes explore_ce_forward.json)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_kernels import BIG_SHAPE, _bench, copy_bandwidth  # noqa: E402
from reference_kernels.triton import cross_entropy as ce  # noqa: E402
from reference_kernels.triton.cross_entropy import (  # noqa: E402
    _block_max_sumexp, _ce_store, _load_block, _row_max_sumexp, _target_logit,
)

LOG2E = tl.constexpr(1.4426950408889634)


@triton.jit
def _ce_persistent(logits_ptr, target_ptr, loss_ptr, lse_ptr, n_rows, n_cols, row_stride,
                   ignore_index, rows_per_prog, n_blocks, BLOCK_N: tl.constexpr,
                   GROUP: tl.constexpr, STAGES: tl.constexpr):
    # Program p walks its rows' blocks in one flat loop (cp.async-pipelined across rows).
    first = tl.program_id(0) * rows_per_prog
    n_it = (tl.minimum(first + rows_per_prog, n_rows) - first) * n_blocks
    m = tl.full([], -float("inf"), tl.float32)
    s = tl.zeros([], tl.float32)
    for it in tl.range(0, n_it, num_stages=STAGES):
        row = (first + it // n_blocks).to(tl.int64)
        blk = it % n_blocks
        x = _load_block(logits_ptr + row * row_stride, blk * BLOCK_N, n_cols, tl.float32,
                        BLOCK_N, GROUP)
        m_g = tl.max(x, axis=1)
        shift_g = tl.where(m_g == -float("inf"), 0.0, m_g)
        s_g = tl.sum(tl.exp2(x * LOG2E - shift_g[:, None] * LOG2E), axis=1)
        m_new = tl.maximum(m, tl.max(m_g, axis=0))
        shift = tl.where(m_new == -float("inf"), 0.0, m_new)
        s_g = tl.where(m_g == -float("inf"), 0.0, s_g * tl.exp2(m_g * LOG2E - shift * LOG2E))
        s_new = s * tl.exp(m - shift) + tl.sum(s_g, axis=0)
        last = blk == n_blocks - 1
        x_t, ignored, valid = _target_logit(logits_ptr, target_ptr, row, last, n_cols,
                                            row_stride, ignore_index)
        _ce_store(loss_ptr, lse_ptr, row, last, m_new + tl.log(s_new), x_t, ignored, valid)
        m = tl.where(last, -float("inf"), m_new)
        s = tl.where(last, 0.0, s_new)


@triton.jit
def _ce_thread_max(logits_ptr, target_ptr, loss_ptr, lse_ptr, n_cols, row_stride,
                   ignore_index, R: tl.constexpr, T: tl.constexpr, GROUP: tl.constexpr):
    # One row of R*T*GROUP logits; each of T threads shifts its R vectors by one max.
    row = tl.program_id(0).to(tl.int64)
    idx = (tl.arange(0, R)[:, None, None] * (T * GROUP)
           + tl.arange(0, T)[None, :, None] * GROUP + tl.arange(0, GROUP)[None, None, :])
    x = tl.load(logits_ptr + row * row_stride + idx, mask=idx < n_cols,
                other=-float("inf")).to(tl.float32)
    x_t, ignored, valid = _target_logit(logits_ptr, target_ptr, row, row >= 0, n_cols,
                                        row_stride, ignore_index)
    m_t = tl.max(tl.max(x, axis=2), axis=0)
    sh_t = tl.where(m_t == -float("inf"), 0.0, m_t)
    s_t = tl.sum(tl.sum(tl.exp2(x * LOG2E - sh_t[None, :, None] * LOG2E), axis=2), axis=0)
    m = tl.max(m_t, axis=0)
    shift = tl.where(m == -float("inf"), 0.0, m)
    s = tl.sum(tl.where(m_t == -float("inf"), 0.0,
                        s_t * tl.exp2(m_t * LOG2E - shift * LOG2E)), axis=0)
    _ce_store(loss_ptr, lse_ptr, row, row >= 0, m + tl.log(s), x_t, ignored, valid)


@triton.jit
def _lse_only(logits_ptr, lse_ptr, n_cols, row_stride, BLOCK_N: tl.constexpr,
              GROUP: tl.constexpr):
    # The shipped forward without the target logit: what its two dependent loads cost.
    row = tl.program_id(0).to(tl.int64)
    x_row = logits_ptr + row * row_stride
    first = _load_block(x_row, 0, n_cols, tl.float32, BLOCK_N, GROUP)
    m, s = _row_max_sumexp(x_row, first, 0, n_cols, n_cols, tl.float32, BLOCK_N, GROUP)
    tl.store(lse_ptr + row, m + tl.log(s))


@triton.jit
def _row_sums(x_ptr, out_ptr, n_cols, ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    # ROWS whole rows per program, read and summed: the read-only stream alone.
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * n_cols + cols[None, :]).to(tl.float32)
    tl.store(out_ptr + rows, tl.sum(x, axis=1))


@triton.jit
def _row_sums_cached(x_ptr, out_ptr, n_cols, BLOCK_N: tl.constexpr, CACHE: tl.constexpr,
                     EVICT: tl.constexpr):
    # One row per program with a cache modifier / eviction hint on the stream.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * n_cols + cols, cache_modifier=CACHE,
                eviction_policy=EVICT).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(x, axis=0))


@triton.jit
def _ce_cached(logits_ptr, target_ptr, loss_ptr, lse_ptr, n_cols, row_stride, ignore_index,
               BLOCK_N: tl.constexpr, GROUP: tl.constexpr, CACHE: tl.constexpr,
               EVICT: tl.constexpr):
    # The shipped one-block forward with a cache modifier / eviction hint on the logits.
    row = tl.program_id(0).to(tl.int64)
    idx = tl.arange(0, BLOCK_N // GROUP)[:, None] * GROUP + tl.arange(0, GROUP)[None, :]
    x = tl.load(logits_ptr + row * row_stride + idx, mask=idx < n_cols, other=-float("inf"),
                cache_modifier=CACHE, eviction_policy=EVICT).to(tl.float32)
    x_t, ignored, valid = _target_logit(logits_ptr, target_ptr, row, row >= 0, n_cols,
                                        row_stride, ignore_index)
    m, s = _block_max_sumexp(x)
    _ce_store(loss_ptr, lse_ptr, row, row >= 0, m + tl.log(s), x_t, ignored, valid)


@triton.jit
def _row_sums_persistent(x_ptr, out_ptr, n_rows, n_cols, rows_per_prog,
                         BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    first = tl.program_id(0) * rows_per_prog
    cols = tl.arange(0, BLOCK_N)
    for r in tl.range(first, tl.minimum(first + rows_per_prog, n_rows), num_stages=STAGES):
        x = tl.load(x_ptr + r.to(tl.int64) * n_cols + cols).to(tl.float32)
        tl.store(out_ptr + r, tl.sum(x, axis=0))


def _variants(x, target, loss, lse, sms: int) -> dict:
    """name -> (launch, checks the loss?) for one (rows, 8192) bf16 logits tensor."""
    n_rows, n_cols = x.shape
    stride = x.stride(0)
    out = {"shipped default": (lambda: ce.cross_entropy_fwd(x, target, -100), False)}
    for per_sm in (4, 8, 16):
        for stages in (1, 3):
            rpp = triton.cdiv(n_rows, sms * per_sm)
            grid = (triton.cdiv(n_rows, rpp),)
            out[f"persistent per_sm={per_sm} stages={stages}"] = (
                lambda g=grid, r=rpp, st=stages: _ce_persistent[g](
                    x, target, loss, lse, n_rows, n_cols, stride, -100, r, 1, BLOCK_N=n_cols,
                    GROUP=8, STAGES=st, num_warps=4), True)
    for warps in (2, 4, 8):
        t = 32 * warps
        out[f"thread max warps={warps}"] = (
            lambda w=warps, t=t: _ce_thread_max[(n_rows,)](
                x, target, loss, lse, n_cols, stride, -100, R=n_cols // (t * 8), T=t, GROUP=8,
                num_warps=w), True)
    for cache, evict in ((".cg", ""), ("", "evict_first")):
        out[f"cache={cache or '-'} evict={evict or '-'}"] = (
            lambda c=cache, e=evict: _ce_cached[(n_rows,)](
                x, target, loss, lse, n_cols, stride, -100, BLOCK_N=n_cols, GROUP=8, CACHE=c,
                EVICT=e, num_warps=4), True)
    out["no target logit"] = (lambda: _lse_only[(n_rows,)](x, lse, n_cols, stride,
                                                           BLOCK_N=n_cols, GROUP=8,
                                                           num_warps=4), False)
    return out


def _read_only(x, sms: int) -> dict:
    n_rows, n_cols = x.shape
    o = torch.empty(n_rows, device=x.device)
    out = {f"row sums rows={r} warps={w}": lambda r=r, w=w: _row_sums[(n_rows // r,)](
        x, o, n_cols, ROWS=r, BLOCK_N=n_cols, num_warps=w) for r, w in ((1, 4), (2, 8), (4, 16))}
    for cache, evict in ((".cg", ""), ("", "evict_first")):
        out[f"row sums cache={cache or '-'} evict={evict or '-'}"] = (
            lambda c=cache, e=evict: _row_sums_cached[(n_rows,)](
                x, o, n_cols, BLOCK_N=n_cols, CACHE=c, EVICT=e, num_warps=4))
    for per_sm in (8, 16):
        for stages in (1, 3):
            rpp = triton.cdiv(n_rows, sms * per_sm)
            out[f"row sums persistent per_sm={per_sm} stages={stages}"] = (
                lambda r=rpp, st=stages: _row_sums_persistent[(triton.cdiv(n_rows, r),)](
                    x, o, n_rows, n_cols, r, BLOCK_N=n_cols, STAGES=st, num_warps=4))
    return out


def _runs(name: str, fn) -> bool:
    try:
        fn()
        torch.cuda.synchronize()
        return True
    except Exception as exc:  # noqa: BLE001 - a variant that does not compile is reported
        print(f"{name}: {exc!r}"[:300], file=sys.stderr)
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("explore_ce_forward: needs a CUDA GPU", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    dtype = torch.bfloat16
    copy = copy_bandwidth(BIG_SHAPE, dtype, False)
    x = torch.randn(BIG_SHAPE, device="cuda", dtype=dtype) * 3
    n_rows, n_cols = x.shape
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    target = torch.randint(0, n_cols, (n_rows,), device="cuda")
    ref_loss, _ = ce.cross_entropy_fwd(x, target, -100)
    loss, lse = torch.empty(n_rows, device="cuda"), torch.empty(n_rows, device="cuda")
    rows = []
    ce_bytes = x.numel() * x.element_size() + n_rows * 16
    for name, (fn, check) in _variants(x, target, loss, lse, sms).items():
        if check:
            loss.fill_(float("nan"))
            if not _runs(name, fn) or not torch.allclose(loss, ref_loss, rtol=1e-5, atol=1e-5):
                print(f"{name}: failed or WRONG, not timed", file=sys.stderr)
                continue
        rows.append({"variant": name, "us": _bench(fn, quick=False) * 1e6})
    for name, fn in _read_only(x, sms).items():
        if _runs(name, fn):
            rows.append({"variant": name, "us": _bench(fn, quick=False) * 1e6, "read_only": True})
    for r in rows:
        nbytes = x.numel() * x.element_size() if r.get("read_only") else ce_bytes
        r["frac_of_copy"] = nbytes / (r["us"] * 1e-6) / copy
        print(f"{r['variant']:45s} {r['us']:7.1f} us  {r['frac_of_copy']:.3f} of copy")
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__, "shape": list(BIG_SHAPE), "dtype": "bfloat16",
           "copy_bytes_per_s": copy}
    (args.out / "explore_ce_forward.json").write_text(
        json.dumps({"environment": env, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
