"""Benchmark of the CUDA C++ reference kernels against eager PyTorch and torch.compile.

Each kernel runs on a large [rows, cols] input (default 16384 x 8192, fp32 and bf16). Times
are triton.testing.do_bench medians (it clears the L2 before every run, so DRAM is measured).
Achieved bandwidth is the kernel's minimum DRAM traffic over its time, reported as a share of
a device-to-device copy of the same input measured in the same process. Writes
bench_cuda_kernels.json and bench_cuda_kernels.md to --out.

    python benchmarks/bench_cuda_kernels.py --out results/
"""
from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from reference_kernels.cuda import bias_act, norms, reference, softmax  # noqa: E402
from reference_kernels.cuda.build import load_extension  # noqa: E402

IMPLS = ("cuda", "eager", "compile")


@dataclass(frozen=True)
class Case:
    """One kernel: its CUDA entry point, eager reference, arguments and minimum traffic."""

    name: str
    cuda: Callable
    eager: Callable
    make_args: Callable[[torch.Tensor], tuple]
    param_vectors: int  # per-column vectors read besides x (weight, bias)


@dataclass(frozen=True)
class Result:
    kernel: str
    dtype: str
    rows: int
    cols: int
    impl: str
    median_s: float | None
    min_bytes: int
    achieved_bytes_per_s: float | None
    frac_of_copy: float | None
    max_abs_diff_vs_eager: float | None
    error: str = ""


def _weight_bias(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n = x.shape[-1]
    weight = 1.0 + 0.1 * torch.randn(n, device=x.device, dtype=torch.float32)
    bias = 0.1 * torch.randn(n, device=x.device, dtype=torch.float32)
    return weight.to(x.dtype), bias.to(x.dtype)


def cases() -> list[Case]:
    n = lambda x: (x.shape[-1],)  # noqa: E731 - normalized shape
    return [
        Case("softmax", softmax.softmax, reference.softmax, lambda x: (x, -1), 0),
        Case("rms_norm", norms.rms_norm, reference.rms_norm,
             lambda x: (x, n(x), _weight_bias(x)[0], 1e-6), 1),
        Case("layer_norm", norms.layer_norm, reference.layer_norm,
             lambda x: (x, n(x), *_weight_bias(x), 1e-5), 2),
        Case("bias_gelu", bias_act.bias_gelu, reference.bias_gelu,
             lambda x: (x, _weight_bias(x)[1]), 1),
        Case("bias_silu", bias_act.bias_silu, reference.bias_silu,
             lambda x: (x, _weight_bias(x)[1]), 1),
    ]


def min_bytes(case: Case, rows: int, cols: int, elem_bytes: int) -> int:
    # Read x once, write y once, read each per-column parameter once.
    # NB: layer_norm/rms_norm statistics (rows * 4 bytes each) are not counted: < 0.01% here.
    return (2 * rows * cols + case.param_vectors * cols) * elem_bytes


def median_s(fn: Callable[[], object], warmup_ms: int, rep_ms: int) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median") * 1e-3


def copy_bandwidth(n_bytes: int, warmup_ms: int, rep_ms: int) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus bytes written."""
    src = torch.empty(n_bytes, dtype=torch.uint8, device="cuda").random_(0, 255)
    dst = torch.empty_like(src)
    seconds = median_s(lambda: dst.copy_(src), warmup_ms, rep_ms)
    return 2 * n_bytes / seconds


def bench_case(case: Case, x: torch.Tensor, copy_bytes_per_s: float, compile_too: bool,
               warmup_ms: int, rep_ms: int) -> list[Result]:
    args = case.make_args(x)
    rows, cols = x.numel() // x.shape[-1], x.shape[-1]
    traffic = min_bytes(case, rows, cols, x.element_size())
    eager_out = case.eager(*args)
    fns = {"cuda": case.cuda, "eager": case.eager}
    if compile_too:
        fns["compile"] = torch.compile(case.eager, dynamic=False)
    results = []
    for impl, fn in fns.items():
        common = dict(kernel=case.name, dtype=str(x.dtype).replace("torch.", ""), rows=rows,
                      cols=cols, impl=impl, min_bytes=traffic)
        try:
            diff = (fn(*args).float() - eager_out.float()).abs().max().item()
            seconds = median_s(lambda: fn(*args), warmup_ms, rep_ms)
        except Exception as exc:  # noqa: BLE001 - a failing impl is reported, not fatal
            results.append(Result(**common, median_s=None, achieved_bytes_per_s=None,
                                  frac_of_copy=None, max_abs_diff_vs_eager=None,
                                  error=f"{type(exc).__name__}: {str(exc).splitlines()[0]}"))
            continue
        results.append(Result(**common, median_s=seconds, achieved_bytes_per_s=traffic / seconds,
                              frac_of_copy=traffic / seconds / copy_bytes_per_s,
                              max_abs_diff_vs_eager=diff))
    return results


def table_row(r: Result) -> str:
    head = f"| {r.kernel} | {r.dtype} | {r.rows}x{r.cols} | {r.impl} |"
    if r.median_s is None:
        return f"{head} failed: {r.error} | | | |"
    return (f"{head} {r.median_s * 1e6:.1f} | {r.achieved_bytes_per_s / 1e9:.0f} | "
            f"{r.frac_of_copy:.2f} | {r.max_abs_diff_vs_eager:.2g} |")


def to_markdown(results: list[Result], copy_bytes_per_s: float, device: str) -> str:
    lines = [f"# CUDA reference kernels on {device}", "",
             f"Device-to-device copy (read + write): {copy_bytes_per_s / 1e9:.0f} GB/s. "
             "Times are do_bench medians with the L2 cleared; bandwidth is minimum traffic / time.",
             "", "| kernel | dtype | shape | impl | time (us) | GB/s | of copy | max diff vs eager |",
             "|---|---|---|---|---:|---:|---:|---:|"]
    lines.extend(table_row(r) for r in results)
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for JSON + markdown")
    parser.add_argument("--rows", type=int, default=16384)
    parser.add_argument("--cols", type=int, default=8192)
    parser.add_argument("--dtypes", default="float32,bfloat16")
    parser.add_argument("--kernels", default=",".join(c.name for c in cases()))
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--warmup-ms", type=int, default=25)
    parser.add_argument("--rep-ms", type=int, default=100)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_cuda_kernels: no CUDA device — run it on a GPU machine", file=sys.stderr)
        return 2
    load_extension()  # build outside the timed region
    torch.manual_seed(0)
    shape = (args.rows, args.cols)
    copy_bps = copy_bandwidth(args.rows * args.cols * 4, args.warmup_ms, args.rep_ms)
    print(f"copy: {copy_bps / 1e9:.0f} GB/s", flush=True)
    wanted = set(args.kernels.split(","))
    results: list[Result] = []
    for dtype_name in args.dtypes.split(","):
        x = torch.randn(shape, device="cuda", dtype=getattr(torch, dtype_name))
        for case in (c for c in cases() if c.name in wanted):
            done = bench_case(case, x, copy_bps, not args.no_compile, args.warmup_ms,
                              args.rep_ms)
            print("\n".join(table_row(r) for r in done), flush=True)  # progress
            results.extend(done)
        del x
    device = torch.cuda.get_device_name()
    args.out.mkdir(parents=True, exist_ok=True)
    payload = {"device": device, "torch": torch.__version__, "shape": list(shape),
               "copy_bytes_per_s": copy_bps, "results": [asdict(r) for r in results]}
    (args.out / "bench_cuda_kernels.json").write_text(json.dumps(payload, indent=2))
    markdown = to_markdown(results, copy_bps, device)
    (args.out / "bench_cuda_kernels.md").write_text(markdown)
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
