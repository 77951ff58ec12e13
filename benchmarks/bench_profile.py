"""Profiler overhead and attribution on the GPT example (issue 2 figures).

Profiles examples/gpt_block.py in inference and train mode, bf16, on the current device, and
writes the wall-time ratio profiled/unprofiled (medians), the sum invariant and the top rows.
    python benchmarks/bench_profile.py --out DIR [--steps 10]
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from kernel_advisor.collect.loader import load_model
from kernel_advisor.pipeline import profile_to_run
from kernel_advisor.collect.rundir import load_run

REPO = Path(__file__).resolve().parent.parent


def one(mode: str, steps: int, out: Path) -> dict:
    loaded = load_model(REPO / "examples" / "gpt_block.py", device="auto", dtype="bfloat16")
    args = {"device": loaded.device.type, "mode": mode, "dtype": "bfloat16", "warmup": 3, "steps": steps,
            "seed": 0, "entry": None}
    run_dir, meta = profile_to_run(loaded, args, out / f"gpt-{mode}")
    run = load_run(run_dir)
    top = run.ops.head(8)
    return {
        "mode": mode, "device": meta["device"]["name"],
        "step_ms_profiled": 1e3 * statistics.median(meta["step_wall_s"]),
        "step_ms_unprofiled": 1e3 * statistics.median(meta["unprofiled_step_wall_s"]),
        "overhead_ratio": meta["profiler_overhead_ratio"],
        "device_busy_frac": meta["device_busy_frac"],
        "rows_sum_over_total": float(run.ops["device_time_total_s"].sum() / meta["total_device_time_s"]),
        "modelled_time_pct": meta["coverage"]["modelled_time_pct"],
        "ceilings_source": meta["ceilings"]["source"],
        "top": [{"name": r.name, "share_pct": r.share_pct, "verdict": r.verdict,
                 "efficiency_frac": r.efficiency_frac} for r in top.itertuples()],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    results = [one(mode, a.steps, a.out) for mode in ("inference", "train")]
    (a.out / "bench_profile.json").write_text(json.dumps(results, indent=2))
    for r in results:
        print(f"{r['mode']:9s} step {r['step_ms_unprofiled']:.2f} ms unprofiled, {r['step_ms_profiled']:.2f} ms "
              f"profiled, overhead {r['overhead_ratio']:.3f}x, busy {r['device_busy_frac']:.2f}, "
              f"sum/total {r['rows_sum_over_total']:.4f}, modelled {r['modelled_time_pct']:.1f}%")


if __name__ == "__main__":
    main()
