"""try-kernel on the GPU: examples/gpt_block.py in bfloat16, Triton softmax / rms_norm / swiglu (+ all).

Writes <out>/try_kernel_gpt_block.json (what try_kernel.json holds) and
<out>/try_kernel_gpt_block.md (the table and notes) and prints the markdown.

    python benchmarks/bench_try_kernel.py --out bench_out [--mode train] [--reps 30]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
DEFAULT_KERNELS = ("triton.softmax", "triton.rms_norm", "triton.swiglu")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="directory for the JSON and markdown")
    p.add_argument("--model", type=Path, default=REPO / "examples" / "gpt_block.py")
    p.add_argument("--kernels", nargs="+", default=list(DEFAULT_KERNELS))
    p.add_argument("--dtype", default="bfloat16", choices=("keep", "float32", "bfloat16", "float16"))
    p.add_argument("--mode", default="inference", choices=("inference", "train"))
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--draws", type=int, default=3)
    p.add_argument("--compile-mode", default="default")
    p.add_argument("--no-all", action="store_true", help="skip the all-together variant")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    if not torch.cuda.is_available():
        print("bench_try_kernel: needs a CUDA GPU (this benchmark measures GPU kernels)", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO))
    from kernel_advisor.collect.loader import load_model
    from kernel_advisor.render.try_render import try_markdown
    from kernel_advisor.trykernel.driver import run_try_kernel
    from kernel_advisor.trykernel.candidates import TryOptions, TryRequest

    os.environ.setdefault("ADVISOR_HOME", str(args.out / ".advisor"))  # never saves into a user's runs
    args.out.mkdir(parents=True, exist_ok=True)
    loaded = load_model(args.model, device="cuda", dtype=args.dtype, seed=0)
    options = TryOptions(mode=args.mode, draws=args.draws, reps=args.reps, compile_mode=args.compile_mode)
    t0 = time.perf_counter()
    record = {"benchmark": "bench_try_kernel", **{k: str(v) for k, v in vars(args).items()}}
    result = run_try_kernel(loaded, TryRequest(tuple(args.kernels), not args.no_all, options=options, record_args=record))
    wall_s = time.perf_counter() - t0
    stem = f"try_kernel_{args.model.stem}" + ("" if args.mode == "inference" else f"_{args.mode}")
    payload = {**result.payload, "benchmark_wall_s": wall_s}
    (args.out / f"{stem}.json").write_text(json.dumps(payload, indent=2) + "\n")
    markdown = try_markdown(result.report) + f"\nwall time of the whole benchmark: {wall_s:.1f} s\n"
    (args.out / f"{stem}.md").write_text(markdown)
    print(markdown)
    return 3 if result.report.failed_candidates else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
