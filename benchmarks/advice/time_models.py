"""Sizing check for the advice models: eager forward time per model, as the sweep runs them.

    python3 benchmarks/advice/time_models.py [--device cuda] [--dtype bfloat16] [--small]

The set wants a mix of host-bound and device-bound models, each forward roughly 0.1-20 ms
on an H200 in bf16; this prints the median step (CUDA events on a GPU), the device memory
peak, and whether the output is finite, so sizes can be checked before a sweep.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_advice import discover_models, extra_args, load_module  # noqa: E402


def time_model(path: Path, device: str, dtype: torch.dtype, small: bool, steps: int = 20) -> dict:
    module = load_module(path, small=small)
    torch.manual_seed(0)
    model = module.Model(*getattr(module, "get_init_inputs", lambda: [])()).eval().to(device)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    autocast = "--autocast" in extra_args(path)
    if not autocast:
        model = model.to(dtype)
        inputs = [x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]
    cuda = device == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    with torch.no_grad(), torch.autocast(device, dtype=dtype, enabled=autocast):
        for i in range(steps + 3):
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                out = model(*inputs)
                end.record()
                torch.cuda.synchronize()
                elapsed = start.elapsed_time(end) / 1e3
            else:
                t0 = time.perf_counter()
                out = model(*inputs)
                elapsed = time.perf_counter() - t0
            if i >= 3:
                times.append(elapsed)
    outs = [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)]
    return {"model": path.stem, "ms": 1e3 * statistics.median(times),
            "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan"),
            "finite": all(bool(torch.isfinite(t.float()).all()) for t in outs)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--models", help="comma-separated file stems")
    args = ap.parse_args(argv)
    wanted = set(args.models.split(",")) if args.models else None
    print(f"{'model':28s} {'ms':>9s} {'peak GiB':>9s} finite")
    for path in discover_models():
        if wanted and path.stem not in wanted:
            continue
        try:
            r = time_model(path, args.device, getattr(torch, args.dtype), args.small)
            print(f"{r['model']:28s} {r['ms']:9.3f} {r['peak_gib']:9.2f} {r['finite']}", flush=True)
        except Exception as e:  # noqa: BLE001 - one broken model must not hide the others
            print(f"{path.stem:28s} ERROR {type(e).__name__}: {str(e)[:200]}", flush=True)
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
