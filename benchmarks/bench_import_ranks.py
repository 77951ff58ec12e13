"""Time and peak memory of `advisor import DIR/` on N ranks replicated from a real 2-rank run.

    python3 benchmarks/bench_import_ranks.py RUN_DIR [--ranks 64] [--target-mb 50] [--work /tmp/rank-traces]
        [--workers N] [--data benchmarks/data/distributed_scale.json]

RUN_DIR is a 2-rank `advisor profile --nproc-per-node 2` run (rank0/, rank1/). Its traces are
replicated to --ranks files of --target-mb each under --work (benchmarks/gen_rank_traces.py,
one deliberate straggler), then imported in a fresh Python process so that its peak RSS is its
own: ru_maxrss of that process and, separately, the largest of its reader workers; main +
workers x worker peak bounds the import (as benchmarks/bench_import.py). The row, keyed by
(kind, ranks, target size, source), is upserted into --data with date, commit, versions and machine.
Budget: peak memory below 2 GiB.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from gen_rank_traces import write_ranks  # noqa: E402
from scale_record import DEFAULT_PATH, upsert_rows  # noqa: E402

BUDGET_BYTES = 2 * 1024**3
_CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from kernel_advisor import api
run = api.import_trace(sys.argv[1], mode="train", out=sys.argv[2], workers=json.loads(sys.argv[3]))
wall_s = time.perf_counter() - t0
doc = json.loads((run.path / "ranks.json").read_text())
own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
skew = doc["skew"]["collectives"]
print(json.dumps({"wall_s": wall_s, "peak_rss_bytes": own.ru_maxrss * 1024, "worker_peak_rss_bytes": kids.ru_maxrss * 1024,
                  "cpu_s": own.ru_utime + own.ru_stime, "worker_cpu_s": kids.ru_utime + kids.ru_stime,
                  "world_size": doc["world_size"], "straggler_ranks": doc["straggler"]["ranks"],
                  "waited_for_rank": doc["straggler"]["waited_for_rank"], "calls_aligned": doc["calls_aligned"],
                  "start_spread_median_us": skew[0]["start_spread_median_us"] if skew else None,
                  "last_to_arrive": max(doc["skew"]["ranks"], key=lambda r: r["last_to_arrive_calls"])["rank"]
                  if doc["skew"]["ranks"] else None}))
"""


def traces(run_dir: Path, work: Path, ranks: int, target_mb: float) -> dict:
    """The replicated directory, reused when its manifest says it is the one asked for."""
    manifest = work / "manifest.json"
    if manifest.is_file():
        doc = json.loads(manifest.read_text())
        if (doc["ranks"], doc["target_bytes"], doc["source"]) == (ranks, int(target_mb * 1e6), str(run_dir)):
            return doc
    return write_ranks(run_dir, work, ranks=ranks, target_mb=target_mb)


def measure(directory: Path, out: Path, workers: int | None) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", _CHILD, str(directory), str(out), json.dumps(workers)],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"the import failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    n = workers or min(os.cpu_count() or 1, 8, result["world_size"])
    result["workers"] = n
    result["peak_bound_bytes"] = result["peak_rss_bytes"] + (n if n > 1 else 0) * result["worker_peak_rss_bytes"]
    return result


def machine() -> dict:
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").is_file() else ""
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_bytes": mem, "os": platform.platform()}


def versions() -> dict:
    import pandas
    import torch
    return {"python": platform.python_version(), "torch": torch.__version__, "pandas": pandas.__version__}


def commit() -> str:
    """ADVISOR_COMMIT when set (a run from an exported tree), else the checkout's HEAD."""
    if os.environ.get("ADVISOR_COMMIT"):
        return os.environ["ADVISOR_COMMIT"]
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--target-mb", type=float, default=50.0)
    ap.add_argument("--work", type=Path, default=Path("/tmp/rank-traces"))
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--source", default="", help="what the 2-rank run was (e.g. 'cpu gloo examples/mlp.py')")
    ap.add_argument("--data", type=Path, default=DEFAULT_PATH)
    ns = ap.parse_args(argv)
    t0 = time.perf_counter()
    manifest = traces(ns.run_dir, ns.work, ns.ranks, ns.target_mb)
    gen_s = time.perf_counter() - t0
    out = ns.work.parent / f"{ns.work.name}-run-{int(time.time())}"
    r = measure(ns.work, out, ns.workers)
    rank0 = json.loads((ns.run_dir / "rank0" / "rank.json").read_text())
    model = Path(str((rank0.get("model") or {}).get("file", "model"))).name
    source = ns.source or f"{rank0['device']['type']} {rank0['rank']['backend']} {model}, 2 ranks"
    row = {"kind": "import_ranks", "key": f"{ns.ranks} ranks x {ns.target_mb:g} MB, {source}",
           "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit(),
           "versions": versions(), "machine": machine(), "ranks": ns.ranks, "target_bytes_per_trace": int(ns.target_mb * 1e6),
           "total_trace_bytes": sum(f["bytes"] for f in manifest["files"].values()), "source": source,
           "generate_s": gen_s, "deliberate_straggler": manifest["straggler"], **r, "budget_bytes": BUDGET_BYTES,
           "command": f"python3 benchmarks/bench_import_ranks.py RUN_DIR --ranks {ns.ranks} --target-mb {ns.target_mb:g}"}
    upsert_rows(ns.data, [row])
    verdict = "within" if r["peak_bound_bytes"] < BUDGET_BYTES else "OVER"
    print(f"{ns.ranks} ranks x {ns.target_mb:g} MB: {r['wall_s']:.1f} s, peak main {r['peak_rss_bytes'] / 2**20:.0f} MiB, "
          f"worker {r['worker_peak_rss_bytes'] / 2**20:.0f} MiB x {r['workers']}, bound {r['peak_bound_bytes'] / 2**30:.2f} GiB "
          f"({verdict} 2 GiB); straggler {manifest['straggler']} found: {r['straggler_ranks']}; wrote {ns.data}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
