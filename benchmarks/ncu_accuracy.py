"""Our roofline verdicts against Nsight Compute's Speed-of-Light, kernel by kernel.

1. Profile benchmarks/ncu_workload.py with kernel_advisor (bf16) → each kernel's owning row
   and that row's verdict, in launch order.
2. Run one forward of the same workload under
   `ncu --clock-control none --nvtx --nvtx-include measure/ --section SpeedOfLight --csv`.
3. Nsight's verdict per kernel, on the same footing as our DRAM roofline: memory-bound when
   "DRAM Throughput" is at least 60 % and at least "Compute (SM) Throughput"; compute-bound
   when SM throughput is at least 60 % and above DRAM; both below 60 % → latency-bound.
   (Nsight's "Memory Throughput" also counts L1/shared traffic — a GEMM shows 95 % there
   with 21 % DRAM — so it is recorded but not used for the verdict.)
4. Zip the two kernel lists in launch order (names are checked to agree) and report the
   agreement weighted by our measured kernel time, with every disagreement listed.
    python benchmarks/ncu_accuracy.py --out DIR
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORKLOAD = REPO / "benchmarks" / "ncu_workload.py"
LIMITER_FRAC = 60.0  # percent, as in verdict_thresholds.yaml


def run_workload() -> None:
    import torch

    from kernel_advisor.collect.loader import load_model

    loaded = load_model(WORKLOAD, device="cuda", dtype="bfloat16")
    with torch.no_grad():
        for _ in range(2):
            loaded.model(*loaded.inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push("measure")
        loaded.model(*loaded.inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()


def our_kernels(out: Path) -> list[dict]:
    """Kernels of one profiled step in launch order, each with its row's verdict."""
    from kernel_advisor.collect.loader import load_model
    from kernel_advisor.pipeline import profile_to_run
    from kernel_advisor.collect.rundir import load_run
    from kernel_advisor.collect.trace import read_trace

    loaded = load_model(WORKLOAD, device="cuda", dtype="bfloat16")
    args = {"device": "cuda", "mode": "inference", "dtype": "bfloat16", "warmup": 2, "steps": 1, "seed": 0,
            "entry": None}
    run_dir, _ = profile_to_run(loaded, args, out / "ncu-workload-run")
    run = load_run(run_dir)
    trace = read_trace(run_dir / "trace.json.gz")
    by_ext = dict(zip(trace.cpu_ops["ext_id"], trace.cpu_ops.index))
    seq = run.sequence
    kernels = trace.gpu[trace.gpu["cat"] == "kernel"].sort_values("ts_us")
    rows = run.ops.set_index("row_id")
    # each kernel → the sequence entry whose op started last before the kernel's launcher
    starts = seq.sort_values("start_us")
    result = []
    for k in kernels.itertuples():
        launcher = by_ext.get(k.ext_id)
        ts = trace.cpu_ops.loc[launcher, "ts_us"] if launcher is not None else k.ts_us
        owner = starts[starts["start_us"] <= ts].iloc[-1]
        row = rows.loc[owner["row_id"]]
        result.append({"kernel": k.name, "dur_s": k.dur_us * 1e-6, "op": row["name"], "verdict": row["verdict"],
                       "efficiency_frac": row["efficiency_frac"]})
    return result


def ncu_kernels(out: Path) -> list[dict]:
    cmd = ["ncu", "--clock-control", "none", "--nvtx", "--nvtx-include", "measure/", "--section", "SpeedOfLight",
           "--csv", sys.executable, str(Path(__file__).resolve()), "--workload"]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    (out / "ncu_stdout.csv").write_text(proc.stdout)
    (out / "ncu_stderr.txt").write_text(proc.stderr)
    if proc.returncode != 0:
        raise SystemExit(f"ncu failed ({proc.returncode}); see ncu_stderr.txt")
    text = proc.stdout[proc.stdout.find('"ID"'):]
    metrics: dict[str, dict] = {}
    for r in csv.DictReader(io.StringIO(text)):
        entry = metrics.setdefault(r["ID"], {"kernel": r["Kernel Name"]})
        entry[r["Metric Name"]] = r["Metric Value"].replace(",", "")
    return [metrics[i] for i in sorted(metrics, key=int)]


def ncu_verdict(dram_pct: float, sm_pct: float) -> str:
    if max(dram_pct, sm_pct) < LIMITER_FRAC:
        return "latency-bound"
    return "memory-bound" if dram_pct >= sm_pct else "compute-bound"


def summarise(pairs: list[dict]) -> dict:
    for p in pairs:
        p["ncu_verdict"] = ncu_verdict(p["ncu_dram_pct"], p["ncu_sm_pct"])
    total = sum(p["dur_s"] for p in pairs)
    agree = sum(p["dur_s"] for p in pairs if p["verdict"] == p["ncu_verdict"])
    return {"kernels": len(pairs), "agreement_by_time_frac": agree / total if total else float("nan"),
            "agreement_by_count_frac": sum(p["verdict"] == p["ncu_verdict"] for p in pairs) / max(len(pairs), 1),
            "pairs": pairs}


def print_summary(summary: dict) -> None:
    print(f"{'op':18s} {'kernel':44s} {'ours':14s} {'eff':>5s} {'ncu':14s} dram% sm% time_us")
    for p in summary["pairs"]:
        print(f"{p['op'][:18]:18s} {p['kernel'][:44]:44s} {p['verdict']:14s} {p['efficiency_frac']:5.2f} "
              f"{p['ncu_verdict']:14s} {p['ncu_dram_pct']:5.0f} {p['ncu_sm_pct']:3.0f} {p['dur_s'] * 1e6:8.1f}")
    print(f"agreement by kernel time: {summary['agreement_by_time_frac']:.3f} "
          f"({summary['agreement_by_count_frac']:.3f} by count, {summary['kernels']} kernels)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path)
    ap.add_argument("--workload", action="store_true", help="internal: run one measured forward")
    ap.add_argument("--resummarise", type=Path, help="recompute the verdicts of a saved ncu_accuracy.json")
    a = ap.parse_args()
    if a.workload:
        run_workload()
        return
    if a.resummarise:
        summary = summarise(json.loads(a.resummarise.read_text())["pairs"])
        a.resummarise.write_text(json.dumps(summary, indent=2))
        print_summary(summary)
        return
    a.out.mkdir(parents=True, exist_ok=True)
    ours = our_kernels(a.out)
    theirs = ncu_kernels(a.out)
    if len(ours) != len(theirs):
        print(f"kernel counts differ: ours {len(ours)}, ncu {len(theirs)}; matching the common prefix")
    pairs = []
    for o, t in zip(ours, theirs):
        short = t["kernel"].split("(")[0].split("<")[0].replace("void ", "").strip()
        pairs.append({**o, "ncu_kernel": t["kernel"], "name_match": short.split("::")[-1] in o["kernel"],
                      "ncu_memory_pct": float(t.get("Memory Throughput", "nan")),
                      "ncu_dram_pct": float(t.get("DRAM Throughput", "nan")),
                      "ncu_sm_pct": float(t.get("Compute (SM) Throughput", "nan")),
                      "ncu_duration": t.get("Duration", "")})
    summary = summarise(pairs)
    (a.out / "ncu_accuracy.json").write_text(json.dumps(summary, indent=2))
    print_summary(summary)


if __name__ == "__main__":
    main()
