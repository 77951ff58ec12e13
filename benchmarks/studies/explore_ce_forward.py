"""The bf16 cross-entropy forward variants behind the shipped one, kept so the
numbers in reference_kernels/triton/cross_entropy.py's FwdConfig NB comment can be re-measured.

At 16384x8192 bf16 it times, as a share of the D2D copy, each variant twice: with
triton.testing.do_bench (L2 flushed, median) and back-to-back without the flush
(bench_kernels._bench_noflush), each against the copy timed the same way. Variants: the
shipped forward and its launch settings (blocks, warps, evict-first), the previous kernel (one
max per 16-byte vector), the target logit's loads first / folded into the max / in a second
launch, persistent programs, the forward without the target logit, and read-only row sums;
then the block loop on Llama-3-sized rows (4096 x 128256): blocks, warps, cp.async stages.
Every variant that computes a loss is checked against the shipped kernel before it is timed.

    python benchmarks/studies/explore_ce_forward.py --out DIR     (writes explore_ce_forward.json)
    python benchmarks/studies/explore_ce_forward.py --out DIR --once   (one untimed launch each, for ncu)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.bench_kernels import (  # noqa: E402
    BIG_SHAPE, _bench, _bench_noflush, copy_bandwidth,
)
from reference_kernels.triton import cross_entropy as ce  # noqa: E402
from reference_kernels.triton.cross_entropy import (  # noqa: E402
    _block_max_sumexp, _ce_store, _load_block, _merge_max_sumexp, _row_max_sumexp,
    _target_logit,
)

LOG2E = tl.constexpr(1.4426950408889634)
LONG_SHAPE = (4096, 128256)  # Llama 3's vocabulary: 16 blocks of 8192 bf16 logits per row


@triton.jit
def _ce_persistent(logits_ptr, target_ptr, loss_ptr, lse_ptr, n_rows, n_cols, row_stride,
                   ignore_index, rows_per_prog, n_blocks, BLOCK_N: tl.constexpr,
                   GROUP: tl.constexpr, THREADS: tl.constexpr, STAGES: tl.constexpr):
    # Program p walks its rows' blocks in one flat loop (cp.async-pipelined across rows).
    first = tl.program_id(0) * rows_per_prog
    n_it = (tl.minimum(first + rows_per_prog, n_rows) - first) * n_blocks
    m = tl.full([], -float("inf"), tl.float32)
    s = tl.zeros([], tl.float32)
    for it in tl.range(0, n_it, num_stages=STAGES):
        row = (first + it // n_blocks).to(tl.int64)
        blk = it % n_blocks
        x = _load_block(logits_ptr + row * row_stride, blk * BLOCK_N, n_cols, tl.float32,
                        BLOCK_N, GROUP, "")
        m_b, s_b = _block_max_sumexp(x, THREADS)
        m_new, s_new = _merge_max_sumexp(m, s, m_b, s_b)
        last = blk == n_blocks - 1
        x_t, ignored, valid = _target_logit(logits_ptr, target_ptr, row, last, n_cols,
                                            row_stride, ignore_index)
        _ce_store(loss_ptr, lse_ptr, row, last, m_new + tl.log(s_new), x_t, ignored, valid)
        m = tl.where(last, -float("inf"), m_new)
        s = tl.where(last, 0.0, s_new)


@triton.jit
def _ce_vector_max(logits_ptr, target_ptr, loss_ptr, lse_ptr, n_cols, row_stride,
                   ignore_index, BLOCK_N: tl.constexpr, GROUP: tl.constexpr):
    # The previous forward: one max per 16-byte vector, each vector's sum rescaled to the
    # block max (one more exp per vector); ptxas interleaves the loads with the exps.
    row = tl.program_id(0).to(tl.int64)
    x = _load_block(logits_ptr + row * row_stride, 0, n_cols, tl.float32, BLOCK_N, GROUP, "")
    x_t, ignored, valid = _target_logit(logits_ptr, target_ptr, row, row >= 0, n_cols,
                                        row_stride, ignore_index)
    m_g = tl.max(x, axis=1)
    shift_g = tl.where(m_g == -float("inf"), 0.0, m_g)
    s_g = tl.sum(tl.exp2(x * LOG2E - shift_g[:, None] * LOG2E), axis=1)
    m = tl.max(m_g, axis=0)
    shift = tl.where(m == -float("inf"), 0.0, m)
    s_g = tl.where(m_g == -float("inf"), 0.0, s_g * tl.exp2(m_g * LOG2E - shift * LOG2E))
    _ce_store(loss_ptr, lse_ptr, row, row >= 0, m + tl.log(tl.sum(s_g, axis=0)), x_t, ignored,
              valid)


@triton.jit
def _ce_target_order(logits_ptr, target_ptr, loss_ptr, lse_ptr, n_cols, row_stride,
                     ignore_index, BLOCK_N: tl.constexpr, GROUP: tl.constexpr,
                     THREADS: tl.constexpr, EVICT: tl.constexpr, FIRST: tl.constexpr,
                     FOLD: tl.constexpr):
    # One-block rows with the target logit's two dependent loads placed differently:
    # FIRST issues them before the row's loads in program order; FOLD takes x[target] into
    # every thread's max (exact: it is one of the row's logits), so ptxas must issue its
    # load before the first exp instead of trailing the row.
    row = tl.program_id(0).to(tl.int64)
    x_row = logits_ptr + row * row_stride
    if FIRST:
        x_t, ignored, valid = _target_logit(logits_ptr, target_ptr, row, row >= 0, n_cols,
                                            row_stride, ignore_index)
        x = _load_block(x_row, 0, n_cols, tl.float32, BLOCK_N, GROUP, EVICT)
    else:
        x = _load_block(x_row, 0, n_cols, tl.float32, BLOCK_N, GROUP, EVICT)
        x_t, ignored, valid = _target_logit(logits_ptr, target_ptr, row, row >= 0, n_cols,
                                            row_stride, ignore_index)
    x3 = tl.reshape(x, [BLOCK_N // (THREADS * GROUP), THREADS, GROUP])
    m_t = tl.max(tl.max(x3, axis=2), axis=0)
    if FOLD:
        m_t = tl.maximum(m_t, tl.where(valid & ~ignored, x_t.to(tl.float32), -float("inf")))
    sh_t = tl.where(m_t == -float("inf"), 0.0, m_t)
    s_t = tl.sum(tl.sum(tl.exp2(x3 * LOG2E - (sh_t * LOG2E)[None, :, None]), axis=2), axis=0)
    m = tl.max(m_t, axis=0)
    shift = tl.where(m == -float("inf"), 0.0, m)
    s = tl.sum(tl.where(m_t == -float("inf"), 0.0, s_t * tl.exp2(m_t * LOG2E - shift * LOG2E)),
               axis=0)
    _ce_store(loss_ptr, lse_ptr, row, row >= 0, m + tl.log(s), x_t, ignored, valid)


@triton.jit
def _ce_gather_loss(logits_ptr, target_ptr, lse_ptr, loss_ptr, n_rows, n_cols, row_stride,
                    ignore_index, ROWS: tl.constexpr):
    # Second kernel of a two-launch forward: loss = lse - x[target] for ROWS rows.
    rows = tl.program_id(0).to(tl.int64) * ROWS + tl.arange(0, ROWS)
    live = rows < n_rows
    x_t, ignored, valid = _target_logit(logits_ptr, target_ptr, rows, live, n_cols,
                                        row_stride, ignore_index)
    lse = tl.load(lse_ptr + rows, mask=live, other=0.0)
    _ce_store(loss_ptr, lse_ptr, rows, live, lse, x_t, ignored, valid)


@triton.jit
def _lse_only(logits_ptr, lse_ptr, n_cols, row_stride, BLOCK_N: tl.constexpr,
              GROUP: tl.constexpr, THREADS: tl.constexpr, EVICT: tl.constexpr):
    # The shipped forward without the target logit: what its two dependent loads cost.
    row = tl.program_id(0).to(tl.int64)
    x_row = logits_ptr + row * row_stride
    first = _load_block(x_row, 0, n_cols, tl.float32, BLOCK_N, GROUP, EVICT)
    m, s = _row_max_sumexp(x_row, first, 0, n_cols, n_cols, tl.float32, BLOCK_N, GROUP,
                           THREADS, EVICT, 1)
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
def _row_sums_persistent(x_ptr, out_ptr, n_rows, n_cols, rows_per_prog,
                         BLOCK_N: tl.constexpr, STAGES: tl.constexpr):
    first = tl.program_id(0) * rows_per_prog
    cols = tl.arange(0, BLOCK_N)
    for r in tl.range(first, tl.minimum(first + rows_per_prog, n_rows), num_stages=STAGES):
        x = tl.load(x_ptr + r.to(tl.int64) * n_cols + cols).to(tl.float32)
        tl.store(out_ptr + r, tl.sum(x, axis=0))


def _variants(x, target, loss, lse, sms: int) -> dict:
    """name -> (launch, writes the loss buffer? else returns (losses, lse)) for one
    (rows, 8192) bf16 logits tensor."""
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
                    GROUP=8, THREADS=128, STAGES=st, num_warps=4), True)
    out["shipped kernel, direct launch"] = (
        lambda: ce._ce_fwd_row[(n_rows,)](x, target, loss, lse, n_cols, stride, -100,
                                          ACC=tl.float32, BLOCK_N=n_cols, GROUP=8,
                                          THREADS=128, EVICT="", STAGES=1, ONE_BLOCK=True,
                                          num_warps=4), True)
    for cfg in ((8192, 4, 8, True), (4096, 4, 8, False), (4096, 4, 8, True), (4096, 2, 8, False),
                (4096, 2, 8, True), (2048, 2, 8, True), (8192, 8, 8, True)):
        out["shipped kernel block={} warps={} group={} evict_first={}".format(*cfg)] = (
            lambda c=cfg: ce.cross_entropy_fwd(x, target, -100, ce.FwdConfig(*c)), False)
    out["one max per vector (previous)"] = (
        lambda: _ce_vector_max[(n_rows,)](x, target, loss, lse, n_cols, stride, -100,
                                          BLOCK_N=n_cols, GROUP=8, num_warps=4), True)
    for evict in ("", "evict_first"):
        for first, fold in ((0, 0), (0, 1), (1, 0), (1, 1)):
            out[f"target first={first} fold={fold} evict={evict or '-'}"] = (
                lambda e=evict, f=first, d=fold: _ce_target_order[(n_rows,)](
                    x, target, loss, lse, n_cols, stride, -100, BLOCK_N=n_cols, GROUP=8,
                    THREADS=128, EVICT=e, FIRST=f, FOLD=d, num_warps=4), True)
        out[f"two launches: lse, then gather evict={evict or '-'}"] = (
            lambda e=evict: (_lse_only[(n_rows,)](x, lse, n_cols, stride, BLOCK_N=n_cols,
                                                  GROUP=8, THREADS=128, EVICT=e, num_warps=4),
                             _ce_gather_loss[(triton.cdiv(n_rows, 1024),)](
                                 x, target, lse, loss, n_rows, n_cols, stride, -100,
                                 ROWS=1024, num_warps=4)), True)
        out[f"no target logit evict={evict or '-'}"] = (
            lambda e=evict: _lse_only[(n_rows,)](x, lse, n_cols, stride, BLOCK_N=n_cols,
                                                 GROUP=8, THREADS=128, EVICT=e, num_warps=4),
            False)
    return out


def _long_row_variants(x, target) -> dict:
    """name -> launch for the block loop of long rows (a Llama-3-sized vocabulary)."""
    out = {"eager F.cross_entropy(reduction='none')":
           lambda: torch.nn.functional.cross_entropy(x, target, reduction="none")}
    for block, warps, stages in ((8192, 4, 1), (8192, 4, 2), (8192, 4, 3), (4096, 4, 1),
                                 (4096, 4, 3), (4096, 2, 3), (2048, 2, 3), (2048, 2, 5)):
        cfg = ce.FwdConfig(block, warps, 8, True, stages)
        out[f"block={block} warps={warps} stages={stages}"] = (
            lambda c=cfg: ce.cross_entropy_fwd(x, target, -100, c))
    return out


def _read_only(x, sms: int) -> dict:
    n_rows, n_cols = x.shape
    o = torch.empty(n_rows, device=x.device)
    out = {"torch.sum(x, -1)": lambda: torch.sum(x, -1),
           "torch.amax(x, -1)": lambda: torch.amax(x, -1)}
    out |= {f"row sums rows={r} warps={w}": lambda r=r, w=w: _row_sums[(n_rows // r,)](
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


def _checked_variants(x, target, loss, lse, ref_loss, sms: int):
    """(name, launch, bytes) of the variants whose losses match the shipped kernel's."""
    nbytes = x.numel() * x.element_size() + x.shape[0] * 16
    for name, (fn, into_buffer) in _variants(x, target, loss, lse, sms).items():
        loss.fill_(float("nan"))
        try:
            out = fn()
            got = loss if into_buffer else out[0]
            ok = torch.allclose(got, ref_loss, rtol=1e-5, atol=1e-5)
        except Exception as exc:  # noqa: BLE001 - a variant that does not compile is reported
            print(f"{name}: {exc!r}"[:300], file=sys.stderr)
            continue
        if ok:
            yield name, fn, nbytes
        else:
            print(f"{name}: WRONG losses, not timed", file=sys.stderr)


def _long_row_rows(dtype) -> list[dict]:
    copy = copy_bandwidth(LONG_SHAPE, dtype, False)
    copy_clean = copy_bandwidth(LONG_SHAPE, dtype, False, flush=False)
    x = torch.randn(LONG_SHAPE, device="cuda", dtype=dtype) * 3
    target = torch.randint(0, x.shape[1], (x.shape[0],), device="cuda")
    ref = torch.nn.functional.cross_entropy(x.float(), target, reduction="none")
    nbytes = x.numel() * x.element_size() + x.shape[0] * 16
    rows = []
    for name, fn in _long_row_variants(x, target).items():
        out = fn()
        got = out[0] if isinstance(out, tuple) else out
        if not torch.allclose(got.float(), ref, rtol=1e-2, atol=1e-2):
            print(f"{name}: WRONG losses, not timed", file=sys.stderr)
            continue
        us, us_clean = _bench(fn, quick=False) * 1e6, _bench_noflush(fn) * 1e6
        rows.append({"variant": name, "shape": list(LONG_SHAPE), "bytes": nbytes, "us": us,
                     "us_clean": us_clean, "frac_of_copy": nbytes / (us * 1e-6) / copy,
                     "frac_of_copy_clean": nbytes / (us_clean * 1e-6) / copy_clean})
        print(f"{LONG_SHAPE} {name:45s} {us:6.1f} us {rows[-1]['frac_of_copy']:.3f} | "
              f"no flush {us_clean:6.1f} us {rows[-1]['frac_of_copy_clean']:.3f}", flush=True)
    return rows


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
    parser.add_argument("--once", action="store_true",
                        help="launch each variant once, untimed (to run under ncu)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("explore_ce_forward: needs a CUDA GPU", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    dtype = torch.bfloat16
    copy = copy_bandwidth(BIG_SHAPE, dtype, False)
    copy_clean = copy_bandwidth(BIG_SHAPE, dtype, False, flush=False)
    x = torch.randn(BIG_SHAPE, device="cuda", dtype=dtype) * 3
    n_rows, n_cols = x.shape
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    target = torch.randint(0, n_cols, (n_rows,), device="cuda")
    ref_loss, _ = ce.cross_entropy_fwd(x, target, -100)
    loss, lse = torch.empty(n_rows, device="cuda"), torch.empty(n_rows, device="cuda")
    if args.once:
        for name, (fn, _) in _variants(x, target, loss, lse, sms).items():
            _runs(name, fn)
        return 0
    timed = [(name, fn, nbytes) for name, fn, nbytes in _checked_variants(
        x, target, loss, lse, ref_loss, sms)]
    timed += [(name, fn, x.numel() * x.element_size()) for name, fn in _read_only(x, sms).items()
              if _runs(name, fn)]
    rows = []
    for name, fn, nbytes in timed:
        us, us_clean = _bench(fn, quick=False) * 1e6, _bench_noflush(fn) * 1e6
        rows.append({"variant": name, "bytes": nbytes, "us": us, "us_clean": us_clean,
                     "frac_of_copy": nbytes / (us * 1e-6) / copy,
                     "frac_of_copy_clean": nbytes / (us_clean * 1e-6) / copy_clean})
        print(f"{name:55s} {us:6.1f} us {rows[-1]['frac_of_copy']:.3f} | no flush "
              f"{us_clean:6.1f} us {rows[-1]['frac_of_copy_clean']:.3f}", flush=True)
    del x, target
    rows += _long_row_rows(dtype)
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__, "shape": list(BIG_SHAPE), "dtype": "bfloat16",
           "copy_bytes_per_s": copy, "copy_bytes_per_s_no_flush": copy_clean}
    (args.out / "explore_ce_forward.json").write_text(
        json.dumps({"environment": env, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
