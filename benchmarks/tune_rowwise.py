"""Launch-setting sweep behind the defaults of the row-wise reference kernels.

At 16384x8192 (and a few other long-row shapes for CUDA) it times each setting with
triton.testing.do_bench (L2 flushed, median) and reports bandwidth as a share of the
device-to-device copy measured in the same process, as bench_kernels.py does:
- triton norm forward: rows per program x warps (FwdConfig);
- triton norm backward: warps x cp.async stages (BwdConfig);
- triton cross-entropy forward: block x warps x logits per thread and load (FwdConfig),
  next to a read-only row-sum kernel that shows what a read-only stream reaches;
- triton gelu (erf) forward and backward with the launchers' defaults;
- triton softmax on short rows (127 and 1024 columns): rows per program x warps, and eager;
- CUDA: the extension built once per setting (-DKA_REGISTER_ROWS in rowwise.h,
  -DKA_BIAS_ACT_ROW_UNROLL / _MIN_BLOCKS in bias_act.cu): softmax, layer_norm, rms_norm and
  bias_gelu. Settings measured once and dropped are listed in the kernels' NB comments.
Writes tune_rowwise.json and tune_rowwise.md to --out.

    python benchmarks/tune_rowwise.py --out DIR [--part triton|cuda|all]
"""
from __future__ import annotations

import argparse
import concurrent.futures
import json
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_kernels import BIG_SHAPE, _bench, copy_bandwidth, make_case  # noqa: E402

CUDA_VARIANTS = {  # name -> -D values in the order of DEFINES
    "register rows; bias_act 1 row x 8 blocks (defaults)": (1, 1, 8),
    "register rows; bias_act 4 rows x 4 blocks": (1, 4, 4),
    "register rows; bias_act 1 row x 6 blocks": (1, 1, 6),
    "register rows; bias_act 2 rows x 8 blocks": (1, 2, 8),
    "shared-memory rows; bias_act 1 row x 8 blocks": (0, 1, 8),
}
DEFINES = ("KA_REGISTER_ROWS", "KA_BIAS_ACT_ROW_UNROLL", "KA_BIAS_ACT_MIN_BLOCKS")
CUDA_SHAPES = ((16384, 8192, torch.float32), (16384, 8192, torch.bfloat16),
               (8192, 16384, torch.bfloat16), (65536, 2048, torch.bfloat16),
               (65536, 2048, torch.float32))


def _row(group: str, kernel: str, dtype: torch.dtype, shape, setting: str, seconds: float,
         nbytes: float, copy_bps: float) -> dict:
    return {"group": group, "kernel": kernel, "dtype": str(dtype).replace("torch.", ""),
            "shape": list(shape), "setting": setting, "us": seconds * 1e6,
            "bytes": nbytes, "frac_of_copy": nbytes / seconds / copy_bps}


def _try(rows: list, fn, *row_args) -> None:
    try:
        rows.append(_row(*row_args[:5], _bench(fn, quick=False), *row_args[5:]))
    except Exception as exc:  # noqa: BLE001 - a setting that fails to compile is reported
        print(f"tune: {row_args[:5]} failed: {exc!r}"[:300], file=sys.stderr, flush=True)


def triton_norm_rows(dtype: torch.dtype, copy_bps: float) -> list[dict]:
    from reference_kernels.triton import norm

    rows = []
    x = torch.randn(BIG_SHAPE, device="cuda", dtype=dtype)
    n_cols = x.shape[1]
    fwd_settings = [(1, 4), (1, 8), (1, 16)]
    # (programs per SM, warps, cp.async stages)
    # NB: 2 stages (0.64-0.71 of copy in bf16) and 4 (no gain over 3) measured and dropped
    bwd_settings = [(1, warps, stages) for stages in (1, 3) for warps in (8, 16)]
    bwd_settings += [(2, 8, 3)]
    for kernel in ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm"):
        case = make_case(kernel, x)  # for its byte counts
        is_rms, fused = "rms" in kernel, kernel.startswith("add_")
        w = torch.randn(n_cols, device="cuda", dtype=dtype)
        b = None if is_rms else torch.randn_like(w)
        r = torch.randn_like(x) if fused else None
        dy = torch.randn_like(x)
        dres = torch.randn_like(x) if fused else None
        y, h, mean, rstd = norm.norm_fwd(x, r, w, b, 1e-5, is_rms)
        saved = h if fused else x
        default_fwd = norm.fwd_config(*x.shape, dtype)
        default_bwd = norm.bwd_config(*x.shape, dtype, is_rms)
        print(f"tune: triton {kernel} {dtype}", file=sys.stderr, flush=True)
        if kernel in ("layer_norm", "rms_norm"):
            for bm, warps in fwd_settings:
                cfg = norm.FwdConfig(bm, warps)
                tag = (f"fwd block_m={bm} warps={warps}"
                       + (" (default)" if cfg == default_fwd else ""))
                _try(rows, lambda c=cfg: norm.norm_fwd(x, r, w, b, 1e-5, is_rms, c), "triton",
                     kernel + " fwd", dtype, BIG_SHAPE, tag, case.fwd_bytes, copy_bps)
        for setting in bwd_settings:
            cfg = norm.BwdConfig(*setting)
            tag = (f"bwd per_sm={cfg.programs_per_sm} warps={cfg.num_warps} "
                   f"stages={cfg.stages}"
                   + (" (default)" if cfg == default_bwd else ""))
            _try(rows, lambda c=cfg: norm.norm_bwd(saved, w, mean, rstd, dy, dres, True,
                                                   b is not None, is_rms, c),
                 "triton", kernel + " bwd", dtype, BIG_SHAPE, tag, case.bwd_bytes, copy_bps)
    return rows


def triton_ce_rows(dtype: torch.dtype, copy_bps: float) -> list[dict]:
    import triton
    import triton.language as tl

    from reference_kernels.triton import cross_entropy as ce

    @triton.jit
    def _row_sum(x_ptr, out_ptr, n_cols, BLOCK_N: tl.constexpr):
        # Reads one row, writes one float: the read-only stream cross-entropy's forward is.
        row = tl.program_id(0).to(tl.int64)
        cols = tl.arange(0, BLOCK_N)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        tl.store(out_ptr + row, tl.sum(x, axis=0))

    rows = []
    x = torch.randn(BIG_SHAPE, device="cuda", dtype=dtype)
    target = torch.randint(0, x.shape[1], (x.shape[0],), device="cuda")
    nbytes = x.numel() * x.element_size() + x.shape[0] * 16
    default = ce.fwd_config(x.shape[1], dtype)
    print(f"tune: triton cross_entropy {dtype}", file=sys.stderr, flush=True)
    # (block columns, warps, contiguous logits per thread and load)
    settings = [ce.FwdConfig(*c) for c in (
        (8192, 4, 8, False), (8192, 4, 8, True), (8192, 8, 8, True), (8192, 4, 4, True),
        (4096, 2, 8, True), (4096, 4, 8, False), (4096, 4, 8, True), (4096, 4, 4, True),
        (2048, 2, 8, True))]
    for cfg in settings:
        tag = (f"block_n={cfg.block_n} warps={cfg.num_warps} group={cfg.group}"
               f" evict_first={cfg.evict_first}" + (" (default)" if cfg == default else ""))
        _try(rows, lambda c=cfg: ce.cross_entropy_fwd(x, target, -100, c), "triton",
             "cross_entropy fwd", dtype, BIG_SHAPE, tag, nbytes, copy_bps)
    out = torch.empty(x.shape[0], device="cuda", dtype=torch.float32)
    for warps in (4, 8, 16):
        _try(rows, lambda w=warps: _row_sum[(x.shape[0],)](x, out, x.shape[1], BLOCK_N=8192,
                                                           num_warps=w),
             "triton", "row_sum (read-only reference)", dtype, BIG_SHAPE, f"warps={warps}",
             x.numel() * x.element_size(), copy_bps)
    return rows


SHORT_ROW_SHAPES = ((32768, 127), (8192, 127), (32768, 1024))
SHORT_ROW_SETTINGS = ((4, 1), (8, 1), (16, 1), (32, 1), (8, 2), (16, 2), (32, 4), (64, 4))


def triton_short_softmax_rows(dtype: torch.dtype, copy_bps: float) -> list[dict]:
    """softmax/log_softmax forward and softmax backward on short rows, where the default
    spreads a row over several warps: rows per program x warps, next to eager."""
    from reference_kernels.triton import softmax as sm

    rows = []
    for shape in SHORT_ROW_SHAPES:
        x = torch.randn(shape, device="cuda", dtype=dtype)
        y, dy = torch.softmax(x, -1), torch.randn_like(x)
        io = x.numel() * x.element_size()
        default = sm.block_config(*shape)
        print(f"tune: triton short-row softmax {shape} {dtype}", file=sys.stderr, flush=True)
        for name, fn, nbytes in (
                ("softmax fwd", lambda c: sm.softmax_fwd(x, False, c), 2 * io),
                ("log_softmax fwd", lambda c: sm.softmax_fwd(x, True, c), 2 * io),
                ("softmax bwd", lambda c: sm.softmax_bwd(y, dy, False, c), 3 * io)):
            settings = {default, *(sm.BlockConfig(m, w) for m, w in SHORT_ROW_SETTINGS)}
            for cfg in sorted(settings, key=lambda c: (c.block_m, c.num_warps)):
                tag = (f"block_m={cfg.block_m} warps={cfg.num_warps}"
                       + (" (default)" if cfg == default else ""))
                _try(rows, lambda c=cfg, f=fn: f(c), "triton", name, dtype, shape, tag, nbytes,
                     copy_bps)
        _try(rows, lambda: torch.softmax(x, -1), "eager", "softmax fwd", dtype, shape,
             "torch.softmax", 2 * io, copy_bps)
        _try(rows, lambda: torch.log_softmax(x, -1), "eager", "log_softmax fwd", dtype, shape,
             "torch.log_softmax", 2 * io, copy_bps)
        _try(rows, lambda: torch._softmax_backward_data(dy, y, -1, dtype), "eager",
             "softmax bwd", dtype, shape, "torch._softmax_backward_data", 3 * io, copy_bps)
    return rows


def triton_gelu_rows(dtype: torch.dtype, copy_bps: float) -> list[dict]:
    rows = []
    x = torch.randn(BIG_SHAPE, device="cuda", dtype=dtype)
    case = make_case("gelu", x)
    _try(rows, case.triton_fwd, "triton", "gelu fwd", dtype, BIG_SHAPE, "default",
         case.fwd_bytes, copy_bps)
    _try(rows, case.triton_bwd, "triton", "gelu bwd", dtype, BIG_SHAPE, "default",
         case.bwd_bytes, copy_bps)
    _try(rows, case.eager_fwd, "eager", "gelu fwd", dtype, BIG_SHAPE, "F.gelu",
         case.fwd_bytes, copy_bps)
    return rows


# The variants share one process; the advisor_cuda operators can be defined once in it.
NO_LIBRARY = "-DKA_NO_TORCH_LIBRARY"


def _defines(flags: tuple[int, ...]) -> list[str]:
    return [f"-D{name}={value}" for name, value in zip(DEFINES, flags)]


def _build_variant(flags: tuple[int, ...]) -> str:
    """Builds one variant of the extension (run in a worker process); returns its module name."""
    from torch.utils.cpp_extension import load

    from reference_kernels.cuda import build

    cap = torch.cuda.get_device_capability()
    defines = _defines(flags)
    module = f"{build.extension_name(cap)}_" + "_".join(map(str, flags))
    build_dir = build.build_directory(module)
    build_dir.mkdir(parents=True, exist_ok=True)
    load(name=module, sources=[str(p) for p in build.source_paths()],
         extra_cflags=[*build.CXX_FLAGS, NO_LIBRARY], extra_cuda_cflags=build.nvcc_flags(cap) + defines,
         build_directory=str(build_dir), verbose=False)
    return module


def cuda_rows(copies: dict) -> list[dict]:
    import torch.nn.functional as F

    started = time.time()
    ctx = torch.multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(len(CUDA_VARIANTS), mp_context=ctx) as pool:
        futures = {name: pool.submit(_build_variant, flags)
                   for name, flags in CUDA_VARIANTS.items()}
        modules = {name: f.result() for name, f in futures.items()}
    print(f"tune: built {len(modules)} CUDA variants in {time.time() - started:.0f} s",
          file=sys.stderr, flush=True)
    from torch.utils.cpp_extension import load

    from reference_kernels.cuda import build

    cap = torch.cuda.get_device_capability()
    rows = []
    for name, flags in CUDA_VARIANTS.items():
        defines = _defines(flags)
        ext = load(name=modules[name], sources=[str(p) for p in build.source_paths()],
                   extra_cflags=[*build.CXX_FLAGS, NO_LIBRARY],
                   extra_cuda_cflags=build.nvcc_flags(cap) + defines,
                   build_directory=str(build.build_directory(modules[name])), verbose=False)
        for n_rows, n_cols, dtype in CUDA_SHAPES:
            copy_bps = copies[dtype]
            x = torch.randn(n_rows, n_cols, device="cuda", dtype=dtype)
            w = torch.randn(n_cols, device="cuda", dtype=dtype)
            b = torch.randn(n_cols, device="cuda", dtype=dtype)
            io = 2 * x.numel() * x.element_size()
            ref = F.layer_norm(x.float(), (n_cols,), w.float(), b.float()).to(dtype)
            got = ext.layer_norm(x, [n_cols], w, b, 1e-5)[0]
            if not torch.allclose(got.float(), ref.float(), atol=2e-2, rtol=2e-2):
                print(f"tune: {name} layer_norm {dtype} WRONG", file=sys.stderr, flush=True)
                continue
            for kernel, fn in (("softmax", lambda: ext.softmax(x)),
                               ("layer_norm", lambda: ext.layer_norm(x, [n_cols], w, b, 1e-5)),
                               ("rms_norm", lambda: ext.rms_norm(x, [n_cols], w, 1e-6)),
                               ("bias_gelu", lambda: ext.bias_act(x, b, 1))):
                if kernel == "bias_gelu" and (n_rows, n_cols) != BIG_SHAPE:
                    continue
                _try(rows, fn, "cuda", kernel, dtype, (n_rows, n_cols), name, io, copy_bps)
    return rows


def markdown(env: dict, rows: list[dict]) -> str:
    copy = ", ".join(f"{k} {v / 1e9:.0f} GB/s" for k, v in env["copy_bytes_per_s"].items())
    lines = [f"# Row-wise launch-setting sweep on {env['gpu']}", "",
             f"torch {env['torch']}, triton {env['triton']}; do_bench medians, L2 flushed; "
             f"D2D copy: {copy}.", "",
             "| impl | kernel | dtype | shape | setting | us | of copy |",
             "|---|---|---|---|---|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['group']} | {r['kernel']} | {r['dtype']} | "
                     f"{r['shape'][0]}x{r['shape'][1]} | {r['setting']} | {r['us']:.1f} | "
                     f"{r['frac_of_copy']:.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    import triton

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--part", choices=("triton", "cuda", "all"), default="all")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("tune_rowwise: needs a CUDA GPU", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    copies = {d: copy_bandwidth(BIG_SHAPE, d, False) for d in (torch.float32, torch.bfloat16)}
    rows: list[dict] = []
    if args.part in ("triton", "all"):
        for dtype in (torch.float32, torch.bfloat16):
            rows += triton_gelu_rows(dtype, copies[dtype])
            rows += triton_ce_rows(dtype, copies[dtype])
            rows += triton_norm_rows(dtype, copies[dtype])
            rows += triton_short_softmax_rows(dtype, copies[dtype])
    if args.part in ("cuda", "all"):
        rows += cuda_rows(copies)
    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__,
           "copy_bytes_per_s": {str(d).replace("torch.", ""): v for d, v in copies.items()}}
    (args.out / "tune_rowwise.json").write_text(json.dumps({"environment": env, "rows": rows},
                                                           indent=1))
    (args.out / "tune_rowwise.md").write_text(markdown(env, rows))
    print(markdown(env, rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
