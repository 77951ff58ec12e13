"""The layer_norm backward variants behind the shipped one, kept so the numbers in
reference_kernels/triton/norm.py's backward NB comments can be re-measured.

At 16384x8192 (bf16, then float32) it first splits the shipped backward's time between its
two kernels (torch.profiler: the per-program dw/db partial rows and their sum), then times
variants of one-row-per-iteration persistent programs, each twice: with
triton.testing.do_bench (L2 flushed, median) and back to back without the flush, each as a
share of the D2D copy timed the same way. Knobs: column masks only where the row is shorter
than the block (EVEN), dx as two FMAs (FMA_DX), rows dealt round-robin to programs instead of
in one run per program (INTERLEAVE), cp.async stages, warps, programs per SM (with a
register cap), no dw/db (the dx-only ceiling of this structure), and the partial-row sum
fused into the same launch behind a grid barrier (a cooperative launch, so every program is
resident). The variants keep bf16's launch settings (8 warps) in float32 too, where the
shipped default is 16: compare float32 variants with each other. Every variant is checked
against the shipped kernel before it is timed. Last,
the shipped bf16 backward at sizes from 64x1024 up with each partial-row sum (torch's or
_sum_parts), per call back to back and on a CUDA graph: the data behind
norm.TRITON_SUM_MIN_ELEMENTS.

    python benchmarks/studies/explore_norm_backward.py --out DIR     (writes explore_norm_backward.json)
    python benchmarks/studies/explore_norm_backward.py --out DIR --once   (one untimed launch each, for ncu)
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
    BIG_SHAPE, _bench, _bench_graph, _bench_noflush, copy_bandwidth, kernel_times,
)
from reference_kernels.triton import norm  # noqa: E402


@triton.jit
def _bwd_rows(x_ptr, w_ptr, mean_ptr, rstd_ptr, dy_ptr, dx_ptr, part_ptr, dw_ptr, db_ptr,
              arrived_ptr, n_rows, n_cols, rows_per_prog, n_progs,
              NEED_DW: tl.constexpr, EVEN: tl.constexpr, FMA_DX: tl.constexpr,
              INTERLEAVE: tl.constexpr, FUSED_SUM: tl.constexpr, STAGES: tl.constexpr,
              BLOCK_N: tl.constexpr, SUM_COLS: tl.constexpr):
    # One row per iteration: reads x, dy (2 * n_cols * elt), writes dx (n_cols * elt);
    # dw/db partial rows (2 * n_cols * 4 per program) as in the shipped kernel.
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < n_cols
    w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_N], tl.float32)
    db_acc = tl.zeros([BLOCK_N], tl.float32)
    if INTERLEAVE:
        first, last, step = pid, n_rows, n_progs
    else:
        first = pid * rows_per_prog
        last = tl.minimum(first + rows_per_prog, n_rows)
        step = 1
    for row in tl.range(first, last, step, num_stages=STAGES):
        offs = tl.cast(row, tl.int64) * n_cols + cols
        if EVEN:
            x = tl.load(x_ptr + offs).to(tl.float32)
            dy = tl.load(dy_ptr + offs).to(tl.float32)
        else:
            x = tl.load(x_ptr + offs, mask=col_ok, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + offs, mask=col_ok, other=0.0).to(tl.float32)
        mean = tl.load(mean_ptr + row)
        rstd = tl.load(rstd_ptr + row)
        xhat = (x - mean) * rstd
        if not EVEN:
            xhat = tl.where(col_ok, xhat, 0.0)
        g = dy * w
        c1 = tl.sum(g * xhat, axis=0) / n_cols
        c2 = tl.sum(g, axis=0) / n_cols
        if FMA_DX:
            dx = g * rstd - (xhat * (c1 * rstd) + c2 * rstd)
        else:
            dx = (g - xhat * c1 - c2) * rstd
        if EVEN:
            tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty))
        else:
            tl.store(dx_ptr + offs, dx.to(dx_ptr.dtype.element_ty), mask=col_ok)
        if NEED_DW:
            dw_acc += dy * xhat
            db_acc += dy
    if NEED_DW:
        tl.store(part_ptr + pid * n_cols + cols, dw_acc, mask=col_ok)
        tl.store(part_ptr + (n_progs + pid) * n_cols + cols, db_acc, mask=col_ok)
        if FUSED_SUM:
            _grid_barrier(arrived_ptr, n_progs)
            _sum_my_columns(part_ptr, dw_ptr, db_ptr, pid, n_progs, n_cols, SUM_COLS)


@triton.jit
def _grid_barrier(arrived_ptr, n_progs):
    # Needs every program resident (a cooperative launch): each publishes its partial rows,
    # then waits until all have.
    tl.debug_barrier()
    tl.atomic_add(arrived_ptr, 1, sem="release", scope="gpu")
    seen = tl.atomic_add(arrived_ptr, 0, sem="acquire", scope="gpu")
    while seen < n_progs:
        seen = tl.atomic_add(arrived_ptr, 0, sem="acquire", scope="gpu")
    tl.debug_barrier()


@triton.jit
def _sum_my_columns(part_ptr, dw_ptr, db_ptr, pid, n_progs, n_cols, SUM_COLS: tl.constexpr):
    # 2 * n_cols output columns (dw, then db) in slices of SUM_COLS, dealt round-robin; each
    # sums its column over the programs' partial rows in program order (bitwise stable).
    n_slices = tl.cdiv(2 * n_cols, SUM_COLS)
    for s in range(pid, n_slices, n_progs):
        out = s * SUM_COLS + tl.arange(0, SUM_COLS)
        ok = out < 2 * n_cols
        which = out // n_cols  # 0: dw, 1: db
        col = out - which * n_cols
        acc = tl.zeros([SUM_COLS], tl.float32)
        for p in range(0, n_progs):
            acc += tl.load(part_ptr + (which * n_progs + p) * n_cols + col, mask=ok, other=0.0,
                           cache_modifier=".cg")
        tl.store(dw_ptr + col, acc, mask=ok & (which == 0))
        tl.store(db_ptr + col, acc, mask=ok & (which == 1))


def _launcher(x, w, mean, rstd, dy, sms: int, *, stages=3, warps=8, per_sm=1, even=True,
              fma=True, inter=False, need_dw=True, fused=False, maxnreg=None, programs=None):
    n_rows, n_cols = x.shape
    programs = programs or sms * per_sm
    rows_per_prog = triton.cdiv(n_rows, programs)
    dx = torch.empty_like(x)
    parts = torch.empty((2, programs, n_cols), device=x.device, dtype=torch.float32)
    dw = torch.empty(n_cols, device=x.device, dtype=torch.float32)
    db = torch.empty_like(dw)
    extra = {"maxnreg": maxnreg} if maxnreg else {}
    if fused:
        extra["launch_cooperative_grid"] = True

    def run():
        arrived = torch.zeros(1, device=x.device, dtype=torch.int32) if fused else dw
        _bwd_rows[(programs,)](
            x, w, mean, rstd, dy, dx, parts, dw, db, arrived, n_rows, n_cols, rows_per_prog,
            programs, NEED_DW=need_dw, EVEN=even and n_cols == triton.next_power_of_2(n_cols),
            FMA_DX=fma, INTERLEAVE=inter, FUSED_SUM=fused, STAGES=stages,
            BLOCK_N=triton.next_power_of_2(n_cols), SUM_COLS=128, num_warps=warps, **extra)
        if need_dw and not fused:
            sums = parts.sum(dim=1)
            return dx, sums[0], sums[1]
        return dx, dw, db
    return run


VARIANTS = {  # name -> _launcher settings
    "1-D rows, masks, 3 stages, 8 warps (shipped's settings)": dict(even=False, fma=False),
    "+ no masks (EVEN)": dict(fma=False),
    "+ no masks + 2-FMA dx": {},
    "+ no masks + 2-FMA dx, round-robin rows": dict(inter=True),
    "+ no masks + 2-FMA dx, 4 stages": dict(stages=4),
    "+ no masks + 2-FMA dx, round-robin rows, 4 stages": dict(inter=True, stages=4),
    "+ no masks + 2-FMA dx, 16 warps": dict(warps=16),
    "+ no masks + 2-FMA dx, 2 programs/SM, 128 registers": dict(per_sm=2, maxnreg=128),
    "+ no masks + 2-FMA dx, sum fused (grid barrier)": dict(fused=True),
    "+ no masks + 2-FMA dx, round-robin, sum fused": dict(fused=True, inter=True),
    "dx only (no dw/db), persistent": dict(need_dw=False),
    "dx only (no dw/db), one program per row": dict(need_dw=False, stages=1, programs=-1),
}


def _variants(x, w, mean, rstd, dy, sms: int) -> dict:
    out = {}
    for name, knobs in VARIANTS.items():
        if knobs.get("programs") == -1:
            knobs = dict(knobs, programs=x.shape[0])
        out[name] = (_launcher(x, w, mean, rstd, dy, sms, **knobs), knobs.get("need_dw", True))
    return out


def _shipped(x, w, mean, rstd, dy) -> dict:
    """The shipped backward as users call it, its main kernel alone (partial rows only), and
    the main kernel followed by torch's sum of the partial rows instead of _sum_parts."""
    n_rows, n_cols = x.shape
    cfg = norm.bwd_config(n_rows, n_cols, x.dtype, False)
    programs = norm._bwd_programs(x.device, n_rows, cfg.programs_per_sm)
    dx = torch.empty_like(x)
    parts = torch.empty((2, programs, n_cols), device=x.device, dtype=torch.float32)

    def main_kernel():
        norm._norm_bwd[(programs,)](
            x, w, mean, rstd, dy, None, dx, parts[0], parts[1], n_rows, n_cols,
            x.stride(0), dy.stride(0), 0, IS_RMS=False, HAS_WEIGHT=True, NEED_DW=True,
            NEED_DB=True, HAS_DRES=False, STAGES=cfg.stages, ACC=tl.float32, BLOCK_M=1,
            BLOCK_N=triton.next_power_of_2(n_cols), num_warps=cfg.num_warps)

    def with_torch_sum():
        main_kernel()
        sums = parts.sum(1)
        return dx, sums[0], sums[1]
    return {SHIPPED: lambda: norm.norm_bwd(x, w, mean, rstd, dy, None, True, True, False),
            "shipped main kernel alone": main_kernel,
            "shipped main kernel + torch parts.sum(1)": with_torch_sum}


SHIPPED = "shipped norm_bwd (kernel + _sum_parts)"


def _kernel_split(fn) -> dict:
    """Device microseconds per call of each kernel fn launches (torch.profiler)."""
    return {name[:80]: seconds * 1e6 for name, seconds in kernel_times(fn).items()}


def _check(name: str, got, ref, need_dw: bool) -> bool:
    dx, dw, db = got
    ok = torch.allclose(dx.float(), ref[0].float(), rtol=2e-2, atol=2e-2)
    if need_dw:
        ok = ok and torch.allclose(dw, ref[1], rtol=1e-3, atol=1e-2)
        ok = ok and torch.allclose(db, ref[2], rtol=1e-3, atol=1e-2)
    if not ok:
        print(f"{name}: differs from the shipped backward; not timed", file=sys.stderr)
    return ok


def _runs(name: str, fn):
    try:
        out = fn()
        torch.cuda.synchronize()
        return out if out is not None else True
    except Exception as exc:  # noqa: BLE001 - a variant that does not compile is reported
        print(f"{name}: {exc!r}"[:300], file=sys.stderr)
        return None


def _inputs(dtype: torch.dtype):
    x = torch.randn(BIG_SHAPE, device="cuda", dtype=dtype)
    w = torch.randn(BIG_SHAPE[1], device="cuda", dtype=dtype)
    dy = torch.randn_like(x)
    _, _, mean, rstd = norm.norm_fwd(x, None, w, None, 1e-5, False)
    return x, w, mean, rstd, dy


def _time(name: str, fn, nbytes: float, copy: float, copy_clean: float) -> dict:
    us, us_clean = _bench(fn, quick=False) * 1e6, _bench_noflush(fn) * 1e6
    row = {"variant": name, "bytes": nbytes, "us": us, "us_clean": us_clean,
           "frac_of_copy": nbytes / (us * 1e-6) / copy,
           "frac_of_copy_clean": nbytes / (us_clean * 1e-6) / copy_clean}
    print(f"{name:58s} {us:6.1f} us {row['frac_of_copy']:.3f} | no flush "
          f"{us_clean:6.1f} us {row['frac_of_copy_clean']:.3f}", flush=True)
    return row


def _explore(dtype: torch.dtype, sms: int, once: bool) -> dict:
    x, w, mean, rstd, dy = _inputs(dtype)
    shipped = _shipped(x, w, mean, rstd, dy)
    variants = _variants(x, w, mean, rstd, dy, sms)
    if once:
        for name, fn in [*shipped.items(), *((n, f) for n, (f, _) in variants.items())]:
            _runs(name, fn)
        return {}
    ref = norm.norm_bwd(x, w, mean, rstd, dy, None, True, True, False)
    copy = copy_bandwidth(BIG_SHAPE, dtype, False)
    copy_clean = copy_bandwidth(BIG_SHAPE, dtype, False, flush=False)
    nbytes = 3 * x.numel() * x.element_size()  # x, dy in; dx out
    rows = [_time(name, fn, nbytes, copy, copy_clean) for name, fn in shipped.items()]
    for name, (fn, need_dw) in variants.items():
        got = _runs(name, fn)
        if got is not None and _check(name, got, ref, need_dw):
            rows.append(_time(name, fn, nbytes, copy, copy_clean))
    split = {name: _kernel_split(shipped[name])
             for name in (SHIPPED, "shipped main kernel + torch parts.sum(1)")}
    print("kernel split (us per call):", split, flush=True)
    return {"dtype": str(dtype).replace("torch.", ""), "copy_bytes_per_s": copy,
            "copy_bytes_per_s_no_flush": copy_clean, "kernel_split_us": split, "rows": rows}


SUM_SIZES = ((64, 1024), (1024, 1024), (2048, 2048), (4096, 2048), (4096, 4096), (8192, 4096),
             (8192, 8192), (16384, 8192))


def _sum_path_by_size() -> list[dict]:
    """bf16 layer_norm backward per call with each partial-sum path (torch's parts.sum or
    _sum_parts): back to back (what a training loop sees, host launch costs included) and
    replayed from a CUDA graph (GPU time only); sets norm.TRITON_SUM_MIN_ELEMENTS."""
    rows, saved = [], norm.TRITON_SUM_MIN_ELEMENTS
    try:
        for shape in SUM_SIZES:
            x = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
            w = torch.randn(shape[1], device="cuda", dtype=torch.bfloat16)
            dy = torch.randn_like(x)
            _, _, mean, rstd = norm.norm_fwd(x, None, w, None, 1e-5, False)

            def backward(x=x, w=w, mean=mean, rstd=rstd, dy=dy):
                return norm.norm_bwd(x, w, mean, rstd, dy, None, True, True, False)
            for path, threshold in (("torch sum", x.numel() + 1), ("_sum_parts", 0)):
                norm.TRITON_SUM_MIN_ELEMENTS = threshold
                row = {"shape": list(shape), "path": path,
                       "us_per_call": _bench_noflush(backward) * 1e6,
                       "us_graph": _bench_graph(backward) * 1e6}
                print(f"sum path {shape} {path:10s} {row['us_per_call']:7.1f} us per call, "
                      f"{row['us_graph']:7.1f} us GPU (graph)", flush=True)
                rows.append(row)
    finally:
        norm.TRITON_SUM_MIN_ELEMENTS = saved
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--once", action="store_true",
                        help="launch each variant once, untimed (to run under ncu)")
    parser.add_argument("--dtypes", default="bfloat16,float32",
                        help="comma-separated; empty: only the sum-path-by-size table")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("explore_norm_backward: needs a CUDA GPU", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    results = [_explore(getattr(torch, name), sms, args.once)
               for name in args.dtypes.split(",") if name]
    if args.once:
        return 0
    by_size = _sum_path_by_size()
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__, "shape": list(BIG_SHAPE)}
    (args.out / "explore_norm_backward.json").write_text(
        json.dumps({"environment": env, "results": results, "sum_path_by_size": by_size},
                   indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
