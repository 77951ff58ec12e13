"""Time and peak memory of importing a big chrome trace: read_trace, then read + attribute.

Each measurement runs in a fresh Python process so that its peak RSS is its own. Peak RSS
is ru_maxrss of that process and, separately, the largest of its reader workers; their sum
(main + workers x worker peak) bounds the whole import. Without a trace argument a
1 M-kernel trace is generated first (benchmarks/gen_big_trace.py, seed 0).

    python benchmarks/bench_import.py                     # generate, then measure
    python benchmarks/bench_import.py /tmp/big.json.gz --workers 1 --out bench.json

Budget: a 1 M-kernel trace imports in <= 20 s and <= 2 GB peak RAM on 2 cores.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
BUDGET_S = 20.0
BUDGET_BYTES = 2 * 1024**3

# Runs in the child process; prints one JSON line.
_CHILD = r"""
import json, resource, sys, time
path, workers, with_attribute = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "1"
t0 = time.perf_counter()
from kernel_advisor.collect.trace import read_trace
import pandas
import_s = time.perf_counter() - t0
t1 = time.perf_counter()
trace = read_trace(path, workers=workers)
read_s = time.perf_counter() - t1
result = {"import_s": import_s, "read_s": read_s,
          "rows": {name: len(getattr(trace, name))
                   for name in ("cpu_ops", "annotations", "gpu", "gpu_annotations", "runtime")}}
if with_attribute:
    from kernel_advisor.collect.attribute import attribute
    device_type = "cuda" if trace.meta.get("deviceProperties") else "cpu"
    t2 = time.perf_counter()
    attributed = attribute(trace, device_type)
    attribute_s = time.perf_counter() - t2
    # (ops, sequence, summary) as first specified, or an object with .ops / .sequence
    ops, sequence = attributed[:2] if isinstance(attributed, tuple) else (attributed.ops, attributed.sequence)
    result.update(attribute_s=attribute_s, ops_rows=len(ops), sequence_rows=len(sequence))
scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
result.update(peak_rss_bytes=own.ru_maxrss * scale, worker_peak_rss_bytes=kids.ru_maxrss * scale,
              cpu_s=own.ru_utime + own.ru_stime, worker_cpu_s=kids.ru_utime + kids.ru_stime)
print(json.dumps(result))
"""


def has_attribute() -> bool:
    """True when kernel_advisor.collect.attribute defines `attribute` (written separately)."""
    sys.path.insert(0, str(REPO_ROOT))
    try:
        spec = importlib.util.find_spec("kernel_advisor.collect.attribute")
        if spec is None:
            return False
        from kernel_advisor.collect import attribute as module
        return callable(getattr(module, "attribute", None))
    except Exception as e:  # a half-written module must not stop the read benchmark
        print(f"note: kernel_advisor.collect.attribute is not importable ({e}); skipping it",
              file=sys.stderr)
        return False
    finally:
        sys.path.remove(str(REPO_ROOT))


def measure(trace: Path, workers: int | None, with_attribute: bool) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    t0 = time.perf_counter()
    command = [sys.executable, "-c", _CHILD, str(trace), json.dumps(workers), "1" if with_attribute else "0"]
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    wall_s = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"measurement failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    n_workers = workers if workers is not None else (os.cpu_count() or 1)
    result["process_wall_s"] = wall_s
    result["workers"] = workers
    result["total_peak_rss_bound_bytes"] = (result["peak_rss_bytes"]
                                            + (n_workers if result["worker_peak_rss_bytes"] else 0)
                                            * result["worker_peak_rss_bytes"])
    return result


def trace_facts(trace: Path) -> dict:
    facts = {"path": str(trace), "file_bytes": trace.stat().st_size}
    if trace.read_bytes()[:2] == b"\x1f\x8b":
        with open(trace, "rb") as f:  # NB: gzip ISIZE is the size modulo 2**32
            f.seek(-4, os.SEEK_END)
            facts["uncompressed_bytes_mod_4GiB"] = int.from_bytes(f.read(4), "little")
    return facts


def report(label: str, r: dict) -> str:
    seconds = r["read_s"] + r.get("attribute_s", 0.0)
    gib = r["total_peak_rss_bound_bytes"] / 1024**3
    verdict = "within" if seconds <= BUDGET_S and r["total_peak_rss_bound_bytes"] <= BUDGET_BYTES else "OVER"
    return (f"{label}: {seconds:.1f} s ({r['read_s']:.1f} s read"
            + (f" + {r['attribute_s']:.1f} s attribute" if "attribute_s" in r else "")
            + f"), peak RSS main {r['peak_rss_bytes'] / 1024**2:.0f} MiB,"
            f" worker {r['worker_peak_rss_bytes'] / 1024**2:.0f} MiB,"
            f" bound {gib:.2f} GiB; CPU {r['cpu_s'] + r['worker_cpu_s']:.1f} s; {verdict} budget"
            f" ({BUDGET_S:.0f} s, {BUDGET_BYTES / 1024**3:.0f} GiB)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", help="trace to import; generated when omitted")
    parser.add_argument("--kernels", type=int, default=1_000_000, help="kernels in the generated trace")
    parser.add_argument("--workers", type=int, default=None, help="reader worker processes (default: auto)")
    parser.add_argument("--out", default="bench_import.json", help="where to write the JSON results")
    ns = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        generated = None
        trace = Path(ns.trace) if ns.trace else Path(tmp) / "big_trace.json.gz"
        if not ns.trace:
            sys.path.insert(0, str(Path(__file__).parent))
            from gen_big_trace import write_trace
            t0 = time.perf_counter()
            generated = write_trace(trace, kernels=ns.kernels)
            print(f"generated {trace} in {time.perf_counter() - t0:.0f} s: {generated}")
        results = {"trace": trace_facts(trace), "generated_counts": generated,
                   "cpu_count": os.cpu_count(), "loadavg_before": os.getloadavg(),
                   "read": measure(trace, ns.workers, with_attribute=False)}
        print(report("read_trace", results["read"]))
        if has_attribute():
            results["read_attribute"] = measure(trace, ns.workers, with_attribute=True)
            print(report("read_trace + attribute", results["read_attribute"]))
        else:
            print("kernel_advisor.collect.attribute.attribute not found: measured read_trace only")
        results["loadavg_after"] = os.getloadavg()
    Path(ns.out).write_text(json.dumps(results, indent=2))
    print(f"rows: {results['read']['rows']}; wrote {ns.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
