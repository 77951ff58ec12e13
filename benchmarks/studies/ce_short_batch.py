"""Where the time of a short-batch cross-entropy forward goes (the sweep's `host` losses).

For a few small (rows, vocab) shapes it measures, for the Triton forward and eager
F.cross_entropy: do_bench (L2 flushed, median), CUDA events around back-to-back calls, the
host's time per call (perf_counter over calls that are not waited for), and the GPU's
kernel time per call (torch.profiler, CUDA activity); once before and once after a
torch.compile in the same process, as the sweep interleaves them.

    python benchmarks/studies/ce_short_batch.py --out DIR     (writes ce_short_batch.json)
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from benchmarks.bench_kernels import _bench_noflush, kernel_times  # noqa: E402
from reference_kernels.triton import cross_entropy as ce  # noqa: E402

SHAPES = ((1, 8192, torch.float32), (1, 32768, torch.float32), (1, 4096, torch.bfloat16),
          (64, 1024, torch.bfloat16), (64, 32768, torch.bfloat16), (1024, 127, torch.bfloat16))


def host_s(fn, calls: int = 300) -> float:
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    seconds = (time.perf_counter() - start) / calls
    torch.cuda.synchronize()
    return seconds


def gpu_s(fn, calls: int = 20) -> tuple[float, list[str]]:
    times = kernel_times(fn, calls)
    return sum(times.values()), sorted({name[:48] for name in times})


def measure(phase: str) -> list[dict]:
    from triton.testing import do_bench

    rows = []
    for n_rows, vocab, dtype in SHAPES:
        x = torch.randn(n_rows, vocab, device="cuda", dtype=dtype)
        target = torch.randint(0, vocab, (n_rows,), device="cuda")
        for impl, fn in (("triton", lambda: ce.cross_entropy_fwd(x, target, -100)),
                         ("eager", lambda: F.cross_entropy(x, target))):
            gpu, kernels = gpu_s(fn)
            row = {"phase": phase, "rows": n_rows, "vocab": vocab, "dtype": str(dtype)[6:],
                   "impl": impl, "do_bench_us": do_bench(fn, return_mode="median") * 1e3,
                   "events_us": _bench_noflush(fn) * 1e6, "host_us": host_s(fn) * 1e6,
                   "gpu_us": gpu * 1e6, "kernels": kernels}
            print(" ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in row.items()), flush=True)
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("ce_short_batch: needs a CUDA GPU", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    rows = measure("before torch.compile")
    compiled = torch.compile(lambda x, t: F.cross_entropy(x, t))
    x = torch.randn(64, 1024, device="cuda", dtype=torch.bfloat16)
    compiled(x, torch.randint(0, 1024, (64,), device="cuda"))
    torch.cuda.synchronize()
    rows += measure("after torch.compile")
    import triton

    env = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "triton": triton.__version__}
    (args.out / "ce_short_batch.json").write_text(
        json.dumps({"environment": env, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
