"""Benchmark the Triton reference kernels on a CUDA GPU; writes JSON and a markdown table.

(a) bandwidth: every memory-bound kernel, forward and backward, at 16384x8192 in float32 and
    bfloat16; achieved bytes/s (minimum traffic over the median time) as a share of the
    device-to-device copy bandwidth measured here, on the same bytes. Target: >= 0.90.
(b) sweep: rows {1, 64, 1024, 8192, 32768} x cols {127, 1024, 4096, 8192, 32768} (at most
    2^27 elements), both dtypes, forward only: the Triton kernel vs eager PyTorch vs
    torch.compile of the eager function (default settings: static first, then automatic
    dynamic shapes, as users get it).
Timing: triton.testing.do_bench, L2 flushed before every rep (its default), medians.

    python benchmarks/bench_kernels.py --out results/ [--quick] [--part a|b|all]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

BIG_SHAPE = (16384, 8192)
SWEEP_ROWS = (1, 64, 1024, 8192, 32768)
SWEEP_COLS = (127, 1024, 4096, 8192, 32768)
MAX_SWEEP_ELEMENTS = 2**27
DTYPES = (torch.float32, torch.bfloat16)
DEVICE = "cuda"


@dataclass(frozen=True)
class Case:
    """One kernel at one shape: callables with no arguments and their minimum traffic."""

    triton_fwd: Callable
    eager_fwd: Callable
    fwd_bytes: float
    triton_bwd: Callable | None = None
    eager_bwd: Callable | None = None
    bwd_bytes: float = 0.0


@dataclass(frozen=True)
class Row:
    part: str
    kernel: str
    direction: str
    dtype: str
    rows: int
    cols: int
    min_bytes: float
    triton_s: float
    eager_s: float
    compile_s: float  # NaN when not measured
    triton_bytes_per_s: float
    copy_frac: float  # triton bandwidth / measured copy bandwidth (part a), NaN otherwise


def _bench(fn: Callable, quick: bool) -> float:
    from triton.testing import do_bench

    warmup_ms, rep_ms = (5, 20) if quick else (5, 30)  # NB: keeps the full sweep ~4 min
    return do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median") * 1e-3


def _eager_grad(fn: Callable, inputs: list[torch.Tensor], upstream) -> Callable:
    leaves = [t.detach().requires_grad_() for t in inputs]
    out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    ups = upstream if isinstance(upstream, (tuple, list)) else (upstream,)
    return lambda: torch.autograd.grad(outs, leaves, ups[:len(outs)], retain_graph=True)


def _rowwise_case(name: str, x: torch.Tensor) -> Case:
    from reference_kernels.triton import norm, softmax as sm

    rows, cols = x.shape
    e, n = x.element_size(), x.numel()
    dy = torch.randn_like(x)
    if name in ("softmax", "log_softmax"):
        log = name == "log_softmax"
        y = sm.softmax_fwd(x, log)
        eager = torch.log_softmax if log else torch.softmax
        # fwd reads x, writes y: 2Ne. bwd reads y, dy, writes dx: 3Ne.
        return Case(lambda: sm.softmax_fwd(x, log), lambda: eager(x, -1), 2 * n * e,
                    lambda: sm.softmax_bwd(y, dy, log),
                    _eager_grad(lambda t: eager(t, -1), [x], dy), 3 * n * e)
    is_rms, fused = "rms" in name, name.startswith("add_")
    w = torch.randn(cols, device=x.device, dtype=x.dtype)
    b = None if is_rms else torch.randn_like(w)
    r = torch.randn_like(x) if fused else None
    dres = torch.randn_like(x) if fused else None  # its own buffer: no L2 reuse with dy
    y, h, mean, rstd = norm.norm_fwd(x, r, w, b, 1e-5, is_rms)
    saved = h if fused else x
    params = (2 if b is not None else 1) * cols * e
    stats = rows * 4 * (1 if is_rms else 2)
    streams_fwd = 4 if fused else 2  # x (+ residual) in, y (+ h) out
    streams_bwd = 4 if fused else 3  # x/h, dy (+ d new residual) in, dx out
    eager = _eager_norm(is_rms, fused, cols)
    eager_inputs = [x, r, w] if fused else [x, w]
    eager_inputs += [] if b is None else [b]
    return Case(lambda: norm.norm_fwd(x, r, w, b, 1e-5, is_rms), lambda: eager(*eager_inputs),
                streams_fwd * n * e + params + stats,
                lambda: norm.norm_bwd(saved, w, mean, rstd, dy, dres, True, b is not None,
                                      is_rms),
                _eager_grad(eager, eager_inputs, (dy, dres)),
                streams_bwd * n * e + 2 * params + stats)


def _eager_norm(is_rms: bool, fused: bool, cols: int) -> Callable:
    def normed(t, w, b=None):
        return F.rms_norm(t, (cols,), w, 1e-5) if is_rms else F.layer_norm(t, (cols,), w, b, 1e-5)

    if not fused:
        return normed
    return lambda x, r, w, b=None: (normed(x + r, w, b), x + r)


def _pointwise_case(name: str, x: torch.Tensor) -> Case:
    from reference_kernels.triton import gelu, silu, swiglu

    e, n = x.element_size(), x.numel()
    flat, dy = x.view(-1), torch.randn_like(x).view(-1)
    if name == "swiglu":
        b = torch.randn_like(flat)
        # fwd reads a, b, writes y: 3Ne. bwd reads a, b, dy, writes da, db: 5Ne.
        return Case(lambda: swiglu.swiglu_fwd(flat, b), lambda: F.silu(flat) * b, 3 * n * e,
                    lambda: swiglu.swiglu_bwd(flat, b, dy),
                    _eager_grad(lambda s, t: F.silu(s) * t, [flat, b], dy), 5 * n * e)
    if name == "silu":
        return Case(lambda: silu.silu_fwd(flat), lambda: F.silu(flat), 2 * n * e,
                    lambda: silu.silu_bwd(flat, dy), _eager_grad(F.silu, [flat], dy), 3 * n * e)
    tanh = name == "gelu_tanh"
    approx = "tanh" if tanh else "none"
    return Case(lambda: gelu.gelu_fwd(flat, tanh), lambda: F.gelu(flat, approximate=approx),
                2 * n * e, lambda: gelu.gelu_bwd(flat, dy, tanh),
                _eager_grad(lambda t: F.gelu(t, approximate=approx), [flat], dy), 3 * n * e)


def _cross_entropy_case(x: torch.Tensor) -> Case:
    from reference_kernels.triton import cross_entropy as ce

    rows, cols = x.shape
    e, n = x.element_size(), x.numel()
    target = torch.randint(0, cols, (rows,), device=x.device)
    losses, lse = ce.cross_entropy_fwd(x, target, -100)
    scale = torch.full((1,), 1.0 / rows, device=x.device).expand(rows)
    # fwd reads the logits once (Ne) + targets, writes loss and lse per row.
    # bwd reads the logits and writes their gradient (2Ne) + targets, lse.
    return Case(lambda: ce.cross_entropy_fwd(x, target, -100),
                lambda: F.cross_entropy(x, target), n * e + rows * 16,
                lambda: ce.cross_entropy_bwd(x, target, lse, scale, -100),
                _eager_grad(lambda t: F.cross_entropy(t, target), [x],
                            torch.ones((), device=x.device, dtype=x.dtype)),
                2 * n * e + rows * 16)


KERNELS = ("softmax", "log_softmax", "layer_norm", "rms_norm", "add_layer_norm",
           "add_rms_norm", "gelu", "gelu_tanh", "silu", "swiglu", "cross_entropy")


def make_case(name: str, x: torch.Tensor) -> Case:
    if name in ("gelu", "gelu_tanh", "silu", "swiglu"):
        return _pointwise_case(name, x)
    if name == "cross_entropy":
        return _cross_entropy_case(x)
    return _rowwise_case(name, x)


def copy_bandwidth(shape, dtype, quick: bool) -> float:
    """Device-to-device copy of one tensor of this shape: reads and writes its bytes."""
    src = torch.randn(shape, device=DEVICE, dtype=dtype)
    dst = torch.empty_like(src)
    return 2 * src.numel() * src.element_size() / _bench(lambda: dst.copy_(src), quick)


def part_a(quick: bool) -> tuple[list[Row], dict]:
    rows_out, copies = [], {}
    for dtype in DTYPES:
        name = str(dtype).replace("torch.", "")
        copy_bps = copy_bandwidth(BIG_SHAPE, dtype, quick)
        copies[name] = copy_bps
        x = torch.randn(BIG_SHAPE, device=DEVICE, dtype=dtype)
        for kernel in KERNELS:
            print(f"bench_kernels: (a) {kernel} {name}", file=sys.stderr, flush=True)
            case = make_case(kernel, x)
            for direction, tri, eag, nbytes in (("fwd", case.triton_fwd, case.eager_fwd,
                                                 case.fwd_bytes),
                                                ("bwd", case.triton_bwd, case.eager_bwd,
                                                 case.bwd_bytes)):
                t, te = _bench(tri, quick), _bench(eag, quick)
                rows_out.append(Row("a", kernel, direction, name, *BIG_SHAPE, nbytes, t, te,
                                    math.nan, nbytes / t, nbytes / t / copy_bps))
            del case
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
    return rows_out, copies


def sweep_shapes(quick: bool) -> list[tuple[int, int]]:
    rows = (1, 1024, 32768) if quick else SWEEP_ROWS
    cols = (127, 4096, 32768) if quick else SWEEP_COLS
    return [(r, c) for r in rows for c in cols if r * c <= MAX_SWEEP_ELEMENTS]


def part_b(quick: bool) -> list[Row]:
    # --quick: four kernels in bfloat16 only (torch.compile's own compile time dominates).
    kernels = ("softmax", "rms_norm", "swiglu", "cross_entropy") if quick else KERNELS
    out = []
    for dtype in DTYPES[1:] if quick else DTYPES:
        name = str(dtype).replace("torch.", "")
        for kernel in kernels:
            print(f"bench_kernels: (b) {kernel} {name}", file=sys.stderr, flush=True)
            torch._dynamo.reset()  # each kernel starts from a fresh compile cache
            compiled = None
            for rows, cols in sweep_shapes(quick):
                x = torch.randn(rows, cols, device=DEVICE, dtype=dtype)
                case = make_case(kernel, x)
                # Triton and eager before this shape's torch.compile, so no compile work can
                # overlap them. NB: launch-bound cells (< ~15 us) still vary 3-8x run to run on
                # the H200 host: do_bench's events include Triton's Python launch latency.
                t, te = _bench(case.triton_fwd, quick), _bench(case.eager_fwd, quick)
                compiled = compiled or torch.compile(_eager_fn_of(kernel))
                args = _eager_args_of(kernel, x)
                compiled(*args)  # compile outside the timed region
                tc = _bench(lambda: compiled(*args), quick)
                out.append(Row("b", kernel, "fwd", name, rows, cols, case.fwd_bytes, t, te, tc,
                               case.fwd_bytes / t, math.nan))
    return out


def _eager_fn_of(kernel: str) -> Callable:
    fns = {
        "softmax": lambda x: torch.softmax(x, -1),
        "log_softmax": lambda x: torch.log_softmax(x, -1),
        "layer_norm": lambda x, w, b: F.layer_norm(x, (x.shape[-1],), w, b, 1e-5),
        "rms_norm": lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-5),
        "add_layer_norm": lambda x, r, w, b: (F.layer_norm(x + r, (x.shape[-1],), w, b, 1e-5),
                                              x + r),
        "add_rms_norm": lambda x, r, w: (F.rms_norm(x + r, (x.shape[-1],), w, 1e-5), x + r),
        "gelu": F.gelu, "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"), "silu": F.silu,
        "swiglu": lambda a, b: F.silu(a) * b, "cross_entropy": F.cross_entropy,
    }
    return fns[kernel]


def _eager_args_of(kernel: str, x: torch.Tensor) -> tuple:
    cols = x.shape[-1]
    w = torch.randn(cols, device=x.device, dtype=x.dtype)
    other = torch.randn_like(x)  # a second operand, so compiled code cannot share loads
    table = {
        "layer_norm": (x, w, w), "rms_norm": (x, w), "add_layer_norm": (x, other, w, w),
        "add_rms_norm": (x, other, w), "swiglu": (x, other),
        "cross_entropy": (x, torch.randint(0, cols, (x.shape[0],), device=x.device)),
    }
    return table.get(kernel, (x,))


def environment(copies: dict) -> dict:
    import triton

    props = torch.cuda.get_device_properties(0)
    return {"device": props.name, "capability": list(torch.cuda.get_device_capability()),
            "sm_count": props.multi_processor_count, "torch": torch.__version__,
            "triton": triton.__version__, "copy_bytes_per_s": copies,
            "timing": "triton.testing.do_bench, L2 flushed per rep, median"}


def markdown(env: dict, rows: list[Row]) -> str:
    lines = [f"# Triton reference kernels on {env['device']}", "",
             f"torch {env['torch']}, triton {env['triton']}; {env['timing']}.", ""]
    a = [r for r in rows if r.part == "a"]
    if a:
        copy = ", ".join(f"{k} {v / 1e9:.0f} GB/s" for k, v in env["copy_bytes_per_s"].items())
        lines += [f"## (a) Bandwidth at {BIG_SHAPE[0]}x{BIG_SHAPE[1]} (D2D copy: {copy})", "",
                  "| kernel | dir | dtype | min bytes | triton us | GB/s | of copy | eager us |"
                  " vs eager |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r.kernel} | {r.direction} | {r.dtype} | {r.min_bytes / 2**20:.0f} MiB | "
                  f"{r.triton_s * 1e6:.1f} | {r.triton_bytes_per_s / 1e9:.0f} | "
                  f"{r.copy_frac:.2f} | {r.eager_s * 1e6:.1f} | {r.eager_s / r.triton_s:.2f}x |"
                  for r in a]
        lines.append("")
    b = [r for r in rows if r.part == "b"]
    if b:
        lines += ["## (b) Forward sweep: Triton vs eager vs torch.compile", "",
                  "| kernel | dtype | rows x cols | triton us | eager us | compile us | "
                  "vs eager | vs compile | triton GB/s |",
                  "|---|---|---|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r.kernel} | {r.dtype} | {r.rows}x{r.cols} | {r.triton_s * 1e6:.1f} | "
                  f"{r.eager_s * 1e6:.1f} | {r.compile_s * 1e6:.1f} | "
                  f"{r.eager_s / r.triton_s:.2f}x | {r.compile_s / r.triton_s:.2f}x | "
                  f"{r.triton_bytes_per_s / 1e9:.0f} |" for r in b]
    return "\n".join(lines) + "\n"


def _json_row(row: Row) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v)
            for k, v in asdict(row).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for the results")
    parser.add_argument("--quick", action="store_true", help="fewer reps and sweep points")
    parser.add_argument("--part", choices=("a", "b", "all"), default="all")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_kernels: needs a CUDA GPU (torch.cuda.is_available() is False)",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    rows, copies = part_a(args.quick) if args.part in ("a", "all") else ([], {})
    if not copies:
        copies = {str(d).replace("torch.", ""): copy_bandwidth(BIG_SHAPE, d, args.quick)
                  for d in DTYPES}
    env = environment(copies)
    _write(args.out, env, rows, started)  # part (a) survives a sweep that is cut short
    if args.part in ("b", "all"):
        rows += part_b(args.quick)
        _write(args.out, env, rows, started)
    print(markdown(env, rows))
    return 0


def _write(out: Path, env: dict, rows: list[Row], started: float) -> None:
    env = dict(env, wall_s=time.perf_counter() - started)
    payload = {"environment": env, "rows": [_json_row(r) for r in rows]}
    (out / "bench_kernels.json").write_text(json.dumps(payload, indent=1, allow_nan=False))
    (out / "bench_kernels.md").write_text(markdown(env, rows))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from anywhere
    sys.exit(main())
