"""Benchmark the Triton reference kernels on a CUDA GPU; writes JSON and a markdown table.

(a) bandwidth: every memory-bound kernel, forward and backward, at 16384x8192 in float32 and
    bfloat16; achieved bytes/s (minimum traffic over the median time) as a share of the
    device-to-device copy bandwidth measured here, on the same bytes. Target: >= 0.90.
(b) sweep: rows {1, 64, 1024, 8192, 32768} x cols {127, 1024, 4096, 8192, 32768} (at most
    2^27 elements), both dtypes, forward only: the Triton kernel vs eager PyTorch vs
    torch.compile of the eager function (default settings: static first, then automatic
    dynamic shapes, as users get it).
Timing: triton.testing.do_bench, L2 flushed before every rep (its default), medians. Part (a)
also times each kernel back to back without the flush (against the copy timed that way); part
(b) also replays each Triton and eager call from a CUDA graph (its GPU time, no host launch
overhead) and says why Triton loses where it does: tie, host or kernel.

    python benchmarks/bench_kernels.py --out results/ [--quick] [--part a|b|all]
                                       [--kernels softmax cross_entropy ...]
    python benchmarks/bench_kernels.py --out DIR --render bench_kernels.json   (no GPU)
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
    # part a: back-to-back calls without the flush, against the copy timed the same way
    triton_noflush_s: float = math.nan
    copy_frac_noflush: float = math.nan
    # part b: replayed from a CUDA graph, so no host launch overhead (GPU time per call)
    triton_graph_s: float = math.nan
    eager_graph_s: float = math.nan


def _bench(fn: Callable, quick: bool) -> float:
    from triton.testing import do_bench

    warmup_ms, rep_ms = (5, 20) if quick else (5, 30)  # NB: keeps the full sweep ~4 min
    return do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median") * 1e-3


def _bench_noflush(fn: Callable, calls: int = 50, repeats: int = 5) -> float:
    """Seconds per call of back-to-back calls with no L2 flush in between (median over
    `repeats` runs of `calls` calls between two events): no dirty lines of do_bench's flush
    buffer are written back during the call. Events bracket whole runs, not single calls,
    so the host's per-call work (events included) stays ahead of the GPU's."""
    fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        torch.cuda.synchronize()
        runs.append(start.elapsed_time(end) * 1e-3 / calls)
    return sorted(runs)[repeats // 2]


def kernel_times(fn: Callable, calls: int = 20) -> dict[str, float]:
    """Device seconds per call of fn by kernel (and memset/memcpy) name: torch.profiler over
    `calls` calls after one warm-up call."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times: dict[str, float] = {}
    for event in prof.events():
        if event.device_type.name == "CUDA":
            times[event.name] = times.get(event.name, 0.0) + event.device_time * 1e-6 / calls
    return times


def _bench_graph(fn: Callable) -> float:
    """Seconds per call replayed from a CUDA graph: the GPU's time without the host's launch
    overhead; NaN when fn cannot be captured."""
    from triton.testing import do_bench_cudagraph

    try:
        return do_bench_cudagraph(fn, rep=20, return_mode="median") * 1e-3
    except Exception as exc:  # noqa: BLE001 - a capture failure leaves the cell empty
        print(f"bench_kernels: no CUDA graph: {exc!r}"[:200], file=sys.stderr)
        return math.nan


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


def copy_bandwidth(shape, dtype, quick: bool, flush: bool = True) -> float:
    """Device-to-device copy of one tensor of this shape: reads and writes its bytes; timed
    as do_bench times the kernels, or as _bench_noflush does (flush=False)."""
    src = torch.randn(shape, device=DEVICE, dtype=dtype)
    dst = torch.empty_like(src)
    seconds = _bench(lambda: dst.copy_(src), quick) if flush else _bench_noflush(
        lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / seconds


def part_a(quick: bool, kernels=KERNELS) -> tuple[list[Row], dict]:
    """Rows, and {"flushed" | "noflush": {dtype: copy bytes/s}}."""
    rows_out, copies = [], {"flushed": {}, "noflush": {}}
    for dtype in DTYPES:
        name = str(dtype).replace("torch.", "")
        copy_bps = copies["flushed"][name] = copy_bandwidth(BIG_SHAPE, dtype, quick)
        copy_nf = copies["noflush"][name] = copy_bandwidth(BIG_SHAPE, dtype, quick, flush=False)
        x = torch.randn(BIG_SHAPE, device=DEVICE, dtype=dtype)
        for kernel in kernels:
            print(f"bench_kernels: (a) {kernel} {name}", file=sys.stderr, flush=True)
            case = make_case(kernel, x)
            for direction, tri, eag, nbytes in (("fwd", case.triton_fwd, case.eager_fwd,
                                                 case.fwd_bytes),
                                                ("bwd", case.triton_bwd, case.eager_bwd,
                                                 case.bwd_bytes)):
                t, te, t_nf = _bench(tri, quick), _bench(eag, quick), _bench_noflush(tri)
                rows_out.append(Row("a", kernel, direction, name, *BIG_SHAPE, nbytes, t, te,
                                    math.nan, nbytes / t, nbytes / t / copy_bps, t_nf,
                                    nbytes / t_nf / copy_nf))
            del case
            if DEVICE == "cuda":
                torch.cuda.empty_cache()
    return rows_out, copies


def sweep_shapes(quick: bool) -> list[tuple[int, int]]:
    rows = (1, 1024, 32768) if quick else SWEEP_ROWS
    cols = (127, 4096, 32768) if quick else SWEEP_COLS
    return [(r, c) for r in rows for c in cols if r * c <= MAX_SWEEP_ELEMENTS]


def part_b(quick: bool, kernels=KERNELS) -> list[Row]:
    # --quick: at most four kernels in bfloat16 only (torch.compile's compile time dominates).
    if quick:
        kernels = [k for k in kernels if k in ("softmax", "rms_norm", "swiglu", "cross_entropy")]
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
                               case.fwd_bytes / t, math.nan,
                               triton_graph_s=_bench_graph(case.triton_fwd),
                               eager_graph_s=_bench_graph(case.eager_fwd)))
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
            "triton": triton.__version__, "copy_bytes_per_s": copies["flushed"],
            "copy_bytes_per_s_noflush": copies["noflush"],
            "timing": "triton.testing.do_bench, L2 flushed per rep, median",
            "timing_noflush": "median of 5 runs of 50 back-to-back calls between CUDA events",
            "timing_graph": "triton.testing.do_bench_cudagraph (CUDA graph replay), median"}


def markdown(env: dict, rows: list[Row]) -> str:
    lines = [f"# Triton reference kernels on {env['device']}", "",
             f"torch {env['torch']}, triton {env['triton']}; {env['timing']}.", ""]
    a = [r for r in rows if r.part == "a"]
    if a:
        lines += _markdown_a(env, a)
    b = [r for r in rows if r.part == "b"]
    if b:
        lines += _markdown_b(b)
    return "\n".join(lines) + "\n"


def _markdown_a(env: dict, a: list[Row]) -> list[str]:
    copy = ", ".join(f"{k} {v / 1e9:.0f} GB/s" for k, v in env["copy_bytes_per_s"].items())
    copy_nf = ", ".join(f"{k} {v / 1e9:.0f} GB/s"
                        for k, v in env.get("copy_bytes_per_s_noflush", {}).items())
    lines = [f"## (a) Bandwidth at {BIG_SHAPE[0]}x{BIG_SHAPE[1]} (D2D copy: {copy}; "
             f"without the flush: {copy_nf or 'not measured'})", "",
             "`of copy`: do_bench with its L2 flush, against the copy timed the same way. "
             "`no flush`: back-to-back calls, against the copy timed that way; the flush leaves "
             "dirty lines in L2 that a kernel with normal loads writes back on its own time.", "",
             "| kernel | dir | dtype | min bytes | triton us | GB/s | of copy | no flush us | "
             "of copy (no flush) | eager us | vs eager |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    lines += [f"| {r.kernel} | {r.direction} | {r.dtype} | {r.min_bytes / 2**20:.0f} MiB | "
              f"{r.triton_s * 1e6:.1f} | {r.triton_bytes_per_s / 1e9:.0f} | "
              f"{r.copy_frac:.2f} | {r.triton_noflush_s * 1e6:.1f} | "
              f"{r.copy_frac_noflush:.2f} | {r.eager_s * 1e6:.1f} | "
              f"{r.eager_s / r.triton_s:.2f}x |" for r in a]
    return lines + [""]


def _markdown_b(b: list[Row]) -> list[str]:
    lines = ["## (b) Forward sweep: Triton vs eager vs torch.compile", "",
             "`GPU us`: the same call replayed from a CUDA graph (no host launch overhead). "
             "`why`, where Triton is slower than eager: `tie` within 5 %, else `host` when its "
             "GPU time is lower (the Python launch costs more than the kernel), `kernel` when "
             "it is not.", "",
             "| kernel | dtype | rows x cols | triton us | eager us | compile us | vs eager | "
             "vs compile | triton GB/s | triton GPU us | eager GPU us | why |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {r.kernel} | {r.dtype} | {r.rows}x{r.cols} | {r.triton_s * 1e6:.1f} | "
              f"{r.eager_s * 1e6:.1f} | {r.compile_s * 1e6:.1f} | "
              f"{r.eager_s / r.triton_s:.2f}x | {r.compile_s / r.triton_s:.2f}x | "
              f"{r.triton_bytes_per_s / 1e9:.0f} | {r.triton_graph_s * 1e6:.1f} | "
              f"{r.eager_graph_s * 1e6:.1f} | {loss_reason(r)} |" for r in b]
    return lines


TIE = 0.95  # Triton at >= 95 % of eager's speed: a tie, not a loss


def loss_reason(r: Row) -> str:
    """Why Triton loses to eager in a sweep cell: 'tie' (within 5 %), 'host' (its GPU time is
    lower), 'kernel' (it is not), or '' (it does not lose, or CUDA-graph times are missing)."""
    if r.triton_s <= r.eager_s:
        return ""
    if r.eager_s / r.triton_s >= TIE:
        return "tie"
    if math.isnan(r.triton_graph_s) or math.isnan(r.eager_graph_s):
        return ""
    return "host" if r.triton_graph_s < r.eager_graph_s else "kernel"


def load_json(path: Path) -> tuple[dict, list[Row]]:
    """(environment, rows) of a bench_kernels.json; JSON nulls become NaN again."""
    payload = json.loads(path.read_text())
    rows = [Row(**{k: (math.nan if v is None else v) for k, v in r.items()})
            for r in payload["rows"]]
    return payload["environment"], rows


def _json_row(row: Row) -> dict:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v)
            for k, v in asdict(row).items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for the results")
    parser.add_argument("--quick", action="store_true", help="fewer reps and sweep points")
    parser.add_argument("--part", choices=("a", "b", "all"), default="all")
    parser.add_argument("--kernels", nargs="+", choices=KERNELS, metavar="KERNEL",
                        help=f"only these kernels (default: all of {', '.join(KERNELS)})")
    parser.add_argument("--render", type=Path, metavar="JSON",
                        help="re-render bench_kernels.md from a saved bench_kernels.json (no GPU)")
    args = parser.parse_args(argv)
    if args.render:
        env, rows = load_json(args.render)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_kernels.md").write_text(markdown(env, rows))
        return 0
    if not torch.cuda.is_available():
        print("bench_kernels: needs a CUDA GPU (torch.cuda.is_available() is False)",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    kernels = tuple(args.kernels or KERNELS)
    rows, copies = part_a(args.quick, kernels) if args.part in ("a", "all") else ([], {})
    if not copies:
        copies = {"flushed": {str(d).replace("torch.", ""): copy_bandwidth(BIG_SHAPE, d,
                                                                          args.quick)
                              for d in DTYPES}, "noflush": {}}
    env = environment(copies)
    _write(args.out, env, rows, started)  # part (a) survives a sweep that is cut short
    if args.part in ("b", "all"):
        rows += part_b(args.quick, kernels)
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
