"""The row kernels at the sizes where they should run at the bandwidth roof, into kernels.csv.

bench_kernels_csv.py's cells and measurement (checked against float64 first, do_bench medians
with the L2 flushed, providers taking turns, compile in a process of its own), on shapes its
grid leaves out:

- rms_norm and layer_norm, fwd and fwd+bwd, at the transformer widths 3000, 4096, 5120, 7168,
  8192 and 14336, each with x of at least 32 MiB in bfloat16 (64 MiB in float32): the fused
  backward's case (x and dy read once, dx written once, dW/dB partials per resident program).
- softmax and log_softmax, fwd and fwd+bwd, on a few hundred vocabulary-sized rows (512 x 50257,
  256 x 151936, 77 x 49408): fewer rows than 4 programs per SM, split over programs.

Rows are upserted into the same long CSV (same KEY and columns), so `render_kernels.py` and
`--merge` treat them as any other cells.

    python benchmarks/bench_row_roofs.py [--csv PATH] [--ops OP ...] [--dtypes ...]
        [--providers ...] [--budget-s 480] [--plan]
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import bench_kernels_csv as bkc  # noqa: E402

# (rows, cols): rows * cols >= 16 Mi elements (32 MiB of bf16 per row tensor).
NORM_SHAPES = ((6144, 3000), (4096, 4096), (4096, 5120), (4096, 7168), (2048, 8192),
               (2048, 14336))
LONG_ROW_SHAPES = ((512, 50257), (256, 151936), (77, 49408))
SHAPES = {"rms_norm": NORM_SHAPES, "layer_norm": NORM_SHAPES,
          "softmax": LONG_ROW_SHAPES, "log_softmax": LONG_ROW_SHAPES}


def roof_cells(ops=None, dtypes=None, passes=None) -> list:
    """One cell per (op, pass, dtype, shape), in bench_kernels_csv's unit order."""
    reg = bkc.registry_ops()
    out = []
    for op in ops or SHAPES:
        for pass_ in bkc.passes_of(op, reg):
            if passes and pass_ not in passes:
                continue
            for dtype in dtypes or bkc.DTYPES:
                out += [bkc.Cell(op, r, c, dtype, pass_, bkc.shape_class(r, c))
                        for r, c in SHAPES[op]]
    return out


def compile_process(argv: list[str] | None, started: float, budget_s: float | None) -> int:
    """This script for the compile provider alone, in a fresh process, with the budget left."""
    left_s = max(1.0, budget_s - (time.perf_counter() - started)) if budget_s else 0.0
    cmd = bkc.compile_command(list(sys.argv[1:] if argv is None else argv), left_s)
    cmd[1] = str(Path(__file__).resolve())  # the same arguments, to this script
    return subprocess.run(cmd, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=bkc.DEFAULT_CSV)
    ap.add_argument("--ops", nargs="+", choices=list(SHAPES))
    ap.add_argument("--dtypes", nargs="+", choices=bkc.DTYPES)
    ap.add_argument("--passes", nargs="+", choices=bkc.PASSES)
    ap.add_argument("--providers", nargs="+", choices=bkc.PROVIDERS, default=list(bkc.PROVIDERS))
    ap.add_argument("--budget-s", type=float, default=bkc.DEFAULT_BUDGET_S)
    ap.add_argument("--plan", action="store_true", help="print the cells and an estimate; no GPU")
    args = ap.parse_args(argv)
    cell_list = roof_cells(args.ops, args.dtypes, args.passes)
    if args.plan:
        print(bkc.plan_text(cell_list, False))
        return 0
    import torch

    if not torch.cuda.is_available():
        print("bench_row_roofs: needs a CUDA GPU; --plan works without one", file=sys.stderr)
        return 2
    started = time.perf_counter()
    liger_version, why = bkc.liger_status()
    if not liger_version:
        print(f"bench_row_roofs: liger skipped ({why})", flush=True)
    from bench_kernels import BIG_SHAPE, copy_bandwidth

    copy_bps = copy_bandwidth(BIG_SHAPE, torch.float32, quick=False)
    timing = bkc.Timing(bkc.WARMUP_MS, bkc.REP_MS, copy_bps)
    providers = tuple(args.providers)
    # compile in a process of its own, after the others (bench_kernels_csv.main's NB)
    in_process = tuple(p for p in providers if p != "compile") or providers
    left = bkc.run(cell_list, args.csv, "cuda", timing, liger_version, args.budget_s or None,
                   started, in_process)
    rc = 3 if left else 0
    if "compile" in providers and in_process != providers:
        rc = max(rc, compile_process(argv, started, args.budget_s))
    print(f"bench_row_roofs: {time.perf_counter() - started:.0f} s; rows in {args.csv}"
          + (f"; not measured (budget): {left}" if left else ""))
    return rc


if __name__ == "__main__":
    sys.exit(main())
