"""Multi-GPU figures: NCCL all-reduce bus bandwidth, and `advisor profile --nproc-per-node 2` runs.

On a machine with two or more GPUs:
    python benchmarks/bench_ddp.py OUT_DIR
measures all-reduce busbw at three message sizes, then profiles (through the real CLI)
  - tests/data/ddp_tiny_buckets.py under its own DDP wrapping (0.25 MB buckets): its rank
    traces become the fixtures tests/data/ddp_rank{0,1}.json.gz,
  - tests/data/ddp_tiny.py with --fsdp: fixtures tests/data/ddp_fsdp_rank{0,1}.json.gz,
  - examples/gpt_block.py in train mode under DDP: the figures of docs/benchmarks.md,
and writes OUT_DIR/bench_ddp.json (each run's CLI output, ranks.json and run.json's
"distributed") and the fixtures under OUT_DIR/fixtures/.
Without GPUs (`--device cpu`) the same runs go through gloo, as a check of the script.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
MIB = 2**20
RUNS = (  # (name, model file, extra CLI options, steps, fixture prefix or None)
    ("ddp_tiny_buckets", "tests/data/ddp_tiny_buckets.py", (), 2, "ddp"),
    ("fsdp_tiny", "tests/data/ddp_tiny.py", ("--fsdp",), 2, "ddp_fsdp"),
    ("gpt_block_ddp", "examples/gpt_block.py", (), 3, None),
)


def allreduce_sweep(n_gpus: int) -> list[dict]:
    from kernel_advisor.analyze.calibrate import measure_allreduce

    out = []
    for size in (1 * MIB, 16 * MIB, 256 * MIB):
        m = measure_allreduce(n_gpus, size_bytes=size)
        out.append({"size_bytes": m.size_bytes, "median_s": m.median_s, "algbw_bytes_per_s": m.algbw_bytes_per_s,
                    "busbw_bytes_per_s": m.busbw_bytes_per_s, "world_size": m.world_size})
        print(f"all-reduce {size / MIB:6.0f} MiB x {n_gpus}: {m.median_s * 1e6:8.1f} µs, "
              f"busbw {m.busbw_bytes_per_s / 1e9:6.1f} GB/s", flush=True)
    return out


def profile_run(name: str, model: str, extra: tuple, steps: int, device: str, nproc: int, home: Path) -> dict:
    run_dir = home / name
    cmd = [sys.executable, "-m", "kernel_advisor", "profile", str(REPO / model), "--device", device,
           "--mode", "train", "--nproc-per-node", str(nproc), "--steps", str(steps), "--warmup", "2",
           "--out", str(run_dir), *extra]
    pythonpath = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "ADVISOR_HOME": str(home), "COLUMNS": "160", "PYTHONPATH": pythonpath}
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    print(f"{name}: exit {res.returncode}\n{res.stdout[-3000:]}{res.stderr[-2000:]}", flush=True)
    result = {"name": name, "model": model, "exit_code": res.returncode, "stdout": res.stdout,
              "stderr": res.stderr[-4000:]}
    if res.returncode == 0:
        result["ranks"] = json.loads((run_dir / "ranks.json").read_text())
        result["distributed"] = json.loads((run_dir / "run.json").read_text())["distributed"]
    return result


def copy_fixtures(run_dir: Path, prefix: str, nproc: int, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for r in range(nproc):
        shutil.copyfile(run_dir / f"rank{r}" / "trace.json.gz", dest / f"{prefix}_rank{r}.json.gz")


def versions() -> dict:
    nccl = None
    if torch.cuda.is_available():
        nccl = ".".join(map(str, torch.cuda.nccl.version()))
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl,
            "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
            "gpus": torch.cuda.device_count()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    report = {"versions": versions(), "allreduce": [], "runs": []}
    print(report["versions"], flush=True)
    if args.device == "cuda":
        report["allreduce"] = allreduce_sweep(args.nproc)
    with tempfile.TemporaryDirectory(prefix="bench-ddp-") as home:
        for name, model, extra, steps, fixture in RUNS:
            if args.device == "cpu" and name == "gpt_block_ddp":
                model = "examples/mlp.py"  # the CPU check keeps to the small model
            result = profile_run(name, model, extra, steps, args.device, args.nproc, Path(home))
            report["runs"].append(result)
            if fixture and result["exit_code"] == 0:
                copy_fixtures(Path(home) / name, fixture, args.nproc, args.out / "fixtures")
    (args.out / "bench_ddp.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
