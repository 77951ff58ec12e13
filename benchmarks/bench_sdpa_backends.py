"""The SDPA backend table: each fused attention backend alone, per shape, on this GPU.

`recommend` predicts a backend switch (`sdpa_cudnn`, `sdpa_flash`) from this table
(kernel_advisor/recommend/kernel_gain.py), not from the op's headroom: which fused kernel is
faster depends on the head size, the sequence length and the mask, and only a measurement says.

    python3 benchmarks/bench_sdpa_backends.py                 # sweep, upsert the table, render docs
    python3 benchmarks/bench_sdpa_backends.py --table OUT/sdpa_backends.csv --no-docs   # on the GPU machine
    python3 benchmarks/bench_sdpa_backends.py --merge OUT/sdpa_backends.csv   # here: upsert, render docs
    python3 benchmarks/bench_sdpa_backends.py --render-only   # docs from the table as it is

Each cell runs F.scaled_dot_product_attention under `sdpa_kernel([backend])` (that backend or
an error: "unsupported"), timed by triton.testing.do_bench (median, L2 flushed between calls).
Rows are keyed by (gpu, dtype, pass, seq, head_dim, causal, backend) and upserted into
kernel_advisor/data/sdpa_backends.csv with the torch version, commit and date.
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from bench_kernels_csv import commit  # noqa: E402
from docdata import commit_source, splice_block, upsert_rows, write_csv_atomic  # noqa: E402

TABLE = REPO / "kernel_advisor" / "data" / "sdpa_backends.csv"
DOCS = REPO / "docs" / "benchmarks.md"
BEGIN, END = "<!-- sdpa-backends:begin -->", "<!-- sdpa-backends:end -->"
KEY = ["gpu", "dtype", "pass", "seq", "head_dim", "causal", "backend"]
COLUMNS = [*KEY, "batch", "heads", "ms", "status", "reason", "torch", "commit", "date"]
BACKENDS = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}
# The sweep, declared: head sizes of common model families, sequence lengths from a short
# prompt to long context, with and without a causal mask, both passes.
HEAD_DIMS = (64, 80, 96, 128, 256)
SEQS = (128, 256, 512, 1024, 2048, 4096, 8192)
CAUSAL = (False, True)
PASSES = ("fwd", "fwd+bwd")
DTYPES = ("bfloat16", "float16")
HEADS = 16
ROWS_PER_CELL = 1 << 17  # batch x heads x seq: a few hundred MB at most, enough to fill the GPU


def cells(dtypes=DTYPES):
    """(dtype, pass, seq, head_dim, causal), float16 on the two most common head sizes only."""
    for dtype, pass_, seq, d, causal in itertools.product(dtypes, PASSES, SEQS, HEAD_DIMS, CAUSAL):
        if dtype == "bfloat16" or d in (64, 128):
            yield dtype, pass_, seq, d, causal


def batch_for(seq: int) -> int:
    return max(1, ROWS_PER_CELL // (seq * HEADS))


def time_cell(dtype: str, pass_: str, seq: int, head_dim: int, causal: bool, backend: str) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    b = batch_for(seq)
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, HEADS, seq, head_dim, device="cuda", dtype=getattr(torch, dtype), generator=g,
                           requires_grad=pass_ == "fwd+bwd") for _ in range(3))
    dy = torch.randn(b, HEADS, seq, head_dim, device="cuda", dtype=q.dtype, generator=g)

    def step():
        with sdpa_kernel([getattr(SDPBackend, BACKENDS[backend])]):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            if pass_ == "fwd+bwd":
                y.backward(dy)

    row = {"batch": b, "heads": HEADS}
    try:
        step()
        torch.cuda.synchronize()
    except RuntimeError as e:  # the backend does not take this shape, dtype or mask here
        return {**row, "ms": None, "status": "unsupported", "reason": str(e).strip().splitlines()[0][:160]}
    ms = do_bench(step, warmup=10, rep=40, grad_to_none=[q, k, v] if q.requires_grad else None,
                  return_mode="median")
    return {**row, "ms": ms, "status": "ok", "reason": ""}


def sweep(dtypes) -> pd.DataFrame:
    import torch

    gpu = torch.cuda.get_device_name()
    stamp = {"gpu": gpu, "torch": torch.__version__, "commit": commit(),
             "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    rows = []
    for dtype, pass_, seq, d, causal in cells(dtypes):
        for backend in BACKENDS:
            r = time_cell(dtype, pass_, seq, d, causal, backend)
            rows.append({**stamp, "dtype": dtype, "pass": pass_, "seq": seq, "head_dim": d, "causal": causal,
                         "backend": backend, **r})
        print(f"{dtype} {pass_} seq={seq} d={d} causal={causal}: "
              + ", ".join(f"{x['backend']} {x['ms'] if x['ms'] is not None else x['status']}" for x in rows[-3:]),
              flush=True)
    return pd.DataFrame(rows, columns=COLUMNS)


def read_table(path: Path = TABLE) -> pd.DataFrame:
    return pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=COLUMNS)


def render(table: pd.DataFrame) -> str:
    """Per GPU, dtype and pass: cuDNN's time over FlashAttention-2's at each (head size, sequence)
    cell, the geometric mean over the causal and non-causal masks (below 1: cuDNN is faster)."""
    ok = table[table["status"] == "ok"]
    if ok.empty:
        return "_No SDPA backend table measured yet._\n"
    blocks = []
    for (gpu, dtype, pass_), g in ok.groupby(["gpu", "dtype", "pass"], sort=True):
        wide = g.pivot_table(index=["seq", "head_dim", "causal"], columns="backend", values="ms")
        if not {"cudnn", "flash"} <= set(wide.columns):
            continue
        ratio = (wide["cudnn"] / wide["flash"]).groupby(level=["seq", "head_dim"]).apply(
            lambda r: float(r.prod() ** (1 / len(r))))
        grid = ratio.unstack("head_dim")
        dates = sorted(str(d)[:10] for d in g["date"])
        head = (f"**{gpu}, {dtype}, {pass_}** ({dates[0]} to {dates[-1]}, torch {', '.join(sorted(set(g['torch'])))}, "
                f"{commit_source('kernel_advisor/data/sdpa_backends.csv')}): cuDNN time / FlashAttention-2 time")
        lines = ["| seq \\ head size | " + " | ".join(str(c) for c in grid.columns) + " |",
                 "|---:|" + "---:|" * len(grid.columns)]
        for seq, r in grid.iterrows():
            lines.append(f"| {seq} | " + " | ".join("—" if pd.isna(x) else f"{x:.2f}" for x in r) + " |")
        blocks.append(head + "\n\n" + "\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--table", type=Path, default=TABLE)
    ap.add_argument("--docs", type=Path, default=DOCS)
    ap.add_argument("--dtypes", default=",".join(DTYPES))
    ap.add_argument("--render-only", action="store_true")
    ap.add_argument("--no-docs", action="store_true", help="leave docs/benchmarks.md alone")
    ap.add_argument("--merge", type=Path, nargs="+", metavar="CSV", help="upsert these sweeps' rows into --table")
    args = ap.parse_args(argv)
    table = read_table(args.table)
    new = [read_table(p) for p in args.merge] if args.merge else \
        [] if args.render_only else [sweep(tuple(args.dtypes.split(",")))]
    for part in new:
        table = upsert_rows(table, part, KEY)
    if new:
        write_csv_atomic(table.sort_values(KEY).reset_index(drop=True), args.table, float_format="%.6g")
    if args.no_docs:
        return 0
    text = args.docs.read_text() if args.docs.is_file() else ""
    args.docs.write_text(splice_block(text, render(table), BEGIN, END, "SDPA backends, measured"))
    print(f"{len(table)} rows in {args.table}; wrote the SDPA backend section of {args.docs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
