"""What the public paths would cost in place of the trace reader's two internal ones, kept as data.

The trace reader reads kineto's text layout with regular expressions (collect/trace/fast_paths.py)
and hands the blocks of a large trace to worker processes over pipes it frames itself
(collect/trace/pool.py). Each is measured against its public alternative, in fresh processes,
on one trace written by benchmarks/gen_big_trace.py; every variant must give the same tables:

  parse  regex        read_trace, one process (the regex fast path)
         json_blocks  the same stream, every block through json.loads
         json_load    json.load of the whole file, then the same column builders
  pool   serial       read_trace, one process
         worker_pool  read_trace with 2 workers (pool.py)
         executor     2 workers of concurrent.futures.ProcessPoolExecutor (spawn start, GC off
                      in the workers as in pool.py), blocks in flight bounded and read in order

Rows are upserted into benchmarks/data/upstream_paths.csv keyed by (study, variant, kernels,
cpu); `--render` writes docs/architecture.md's "Upstream internals" table from it.

    python3 benchmarks/bench_upstream_paths.py [--kernels 100000] [--repeat 2]
    python3 benchmarks/bench_upstream_paths.py --render [--check]

A copy of the tree without .git: ADVISOR_COMMIT=<short hash> stamps the commit measured.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
from docdata import commit_source, splice_block, upsert_rows, write_csv_atomic  # noqa: E402

CSV_NAME = "benchmarks/data/upstream_paths.csv"
DEFAULT_CSV = REPO / CSV_NAME
DOCS = REPO / "docs" / "architecture.md"
BEGIN, END = "<!-- upstream-paths:begin -->", "<!-- upstream-paths:end -->"
TITLE = "Upstream internals"
KEY = ["study", "variant", "kernels", "cpu"]
STUDIES = {"parse": ("regex", "json_blocks", "json_load"), "pool": ("serial", "worker_pool", "executor")}
POOL_WORKERS = 2


# ---------------------------------------------------------------- in the measured process

def child(variant: str, path: str) -> dict:
    """Read `path` the way `variant` does; time, peak memory and a digest of the tables."""
    import resource
    import time

    from kernel_advisor.collect.trace import read_trace

    workers = POOL_WORKERS if variant in ("worker_pool", "executor") else 1
    _install(variant, path)
    t0 = time.perf_counter()
    trace = read_trace(path, workers=workers)
    wall_s = time.perf_counter() - t0
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"wall_s": wall_s, "peak_rss_bytes": own.ru_maxrss * 1024, "worker_peak_rss_bytes": kids.ru_maxrss * 1024,
            "cpu_s": own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime, "digest": _digest(trace)}


def _install(variant: str, path: str) -> None:
    """Swap the reader's internal path for the public one `variant` measures."""
    from kernel_advisor.collect.trace import read_trace
    from kernel_advisor.collect.trace.pool import item_batch

    reader = sys.modules[read_trace.__module__]
    if variant == "json_blocks":
        sys.modules[item_batch.__module__].fast_rows = lambda block: None
    elif variant == "json_load":
        reader.parse_items = lambda items, workers: _whole_file(path)
    elif variant == "executor":
        reader.parse_items = _executor_items


def _whole_file(path: str):
    import gzip

    from kernel_advisor.collect.trace.pool import item_batch

    with (gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open)(path, "rb") as f:
        events = json.load(f)["traceEvents"]
    yield 0, item_batch(("events", 0, events))


def _executor_items(items, workers: int):
    """pool.parse_items through ProcessPoolExecutor: at most 2 blocks per worker in flight,
    results in file order. A block is a memoryview of the splitter's buffer: bytes to pickle."""
    import gc
    import multiprocessing
    from collections import deque
    from concurrent.futures import ProcessPoolExecutor

    from kernel_advisor.collect.trace.pool import item_batch

    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context, initializer=gc.disable) as executor:
        pending: deque = deque()
        for kind, offset, payload in items:
            if len(pending) >= 2 * workers:
                done_offset, future = pending.popleft()
                yield done_offset, future.result()
            item = (kind, offset, bytes(payload) if kind == "block" else payload)
            pending.append((offset, executor.submit(item_batch, item)))
        while pending:
            done_offset, future = pending.popleft()
            yield done_offset, future.result()


def _digest(trace) -> dict:
    import pandas as pd

    tables = ("cpu_ops", "annotations", "gpu", "gpu_annotations", "runtime", "collectives")
    return {name: [len(getattr(trace, name)),
                   int(pd.util.hash_pandas_object(getattr(trace, name), index=False).sum() % (1 << 61))]
            for name in tables}


# ---------------------------------------------------------------- the driver

def measure(variant: str, trace: Path) -> dict:
    code = (f"import json, sys; sys.path[:0] = [{str(REPO)!r}, {str(HERE)!r}]\n"
            f"import bench_upstream_paths as b\n"
            f"print(json.dumps(b.child({variant!r}, {str(trace)!r})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"{variant} failed (exit {done.returncode}):\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_studies(trace: Path, kernels: int, repeat: int) -> pd.DataFrame:
    """Every variant `repeat` times, alternating. The row's wall time is the fastest run (on a
    shared machine the others waited for other processes), its CPU time the median run's."""
    runs: dict[tuple[str, str], list[dict]] = {}
    for _ in range(repeat):
        for study, variants in STUDIES.items():
            for variant in variants:
                result = measure(variant, trace)
                runs.setdefault((study, variant), []).append(result)
                print(f"{study} {variant}: {result['wall_s']:.2f} s, peak RSS {result['peak_rss_bytes'] >> 20} MiB",
                      flush=True)
    digests = {json.dumps(r["digest"], sort_keys=True) for rs in runs.values() for r in rs}
    if len(digests) != 1:
        raise SystemExit(f"the variants read different tables: {sorted(digests)}")
    stamp = _stamp()
    rows = []
    for (study, variant), results in runs.items():
        walls = [r["wall_s"] for r in results]
        rows.append({"study": study, "variant": variant, "kernels": kernels, "json_bytes": _json_bytes(trace),
                     "wall_s": min(walls), "wall_s_runs": " ".join(f"{w:.1f}" for w in walls),
                     "cpu_s": statistics.median(r["cpu_s"] for r in results),
                     "peak_rss_bytes": max(r["peak_rss_bytes"] for r in results),
                     "worker_peak_rss_bytes": max(r["worker_peak_rss_bytes"] for r in results), **stamp})
    return pd.DataFrame(rows)


def _stamp() -> dict:
    return {"cpu": f"{_cpu_model()}, {os.cpu_count()} cores", "python": platform.python_version(),
            "commit": os.environ.get("ADVISOR_COMMIT") or _git_head(), "date": dt.date.today().isoformat(),
            "loadavg_1min": round(os.getloadavg()[0], 2)}


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def _git_head() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def _json_bytes(trace: Path) -> int:
    with open(trace, "rb") as f:  # NB: gzip ISIZE is the size modulo 4 GiB
        if f.read(2) != b"\x1f\x8b":
            return trace.stat().st_size
        f.seek(-4, os.SEEK_END)
        return int.from_bytes(f.read(4), "little")


# ---------------------------------------------------------------- the docs block

def render(df: pd.DataFrame) -> str:
    """One table per (kernels, cpu): each variant's time and memory, CPU time against the first of its study."""
    blocks = []
    for (kernels, cpu), group in df.groupby(["kernels", "cpu"], sort=True):
        first = group.iloc[0]
        lines = [f"{first['date']} · {cpu} · Python {first['python']} · {commit_source(CSV_NAME)} · "
                 f"`python3 benchmarks/bench_upstream_paths.py "
                 f"--kernels {kernels}` · raw: `{CSV_NAME}`. A generated trace of "
                 f"{kernels:,} kernels ({first['json_bytes'] / 1e6:.0f} MB of JSON), each variant in a fresh "
                 f"process, the variants alternating: wall time is the fastest of the runs listed, CPU time "
                 f"(workers included) the median, peak RSS the largest.", "",
                 "| study | variant | wall s (runs) | CPU s | × first, CPU | peak RSS MiB (a worker's) |",
                 "|---|---|---:|---:|---:|---:|"]
        for study, variants in STUDIES.items():
            rows = group[group.study == study].set_index("variant")
            if rows.empty:
                continue
            base = rows.loc[variants[0], "cpu_s"] if variants[0] in rows.index else float("nan")
            for variant in (v for v in variants if v in rows.index):
                r = rows.loc[variant]
                worker = f" ({r['worker_peak_rss_bytes'] / 2**20:.0f})" if r["worker_peak_rss_bytes"] else ""
                lines.append(f"| {study} | {variant} | {r['wall_s']:.1f} ({r['wall_s_runs']}) | {r['cpu_s']:.1f} | "
                             f"{r['cpu_s'] / base:.2f} | {r['peak_rss_bytes'] / 2**20:.0f}{worker} |")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def render_docs(csv: Path, docs: Path, check: bool) -> int:
    text = docs.read_text()
    new = splice_block(text, render(pd.read_csv(csv)), BEGIN, END, TITLE)
    if check:
        if new != text:
            print(f"{docs} is out of date with {csv}: run --render", file=sys.stderr)
            return 1
        return 0
    docs.write_text(new)
    print(f"wrote {docs}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", nargs="?", help="trace to read; generated (seed 0) when omitted")
    parser.add_argument("--kernels", type=int, default=100_000, help="kernels in the generated trace")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each variant, alternating")
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--render", action="store_true", help="write the docs block from --csv and stop")
    parser.add_argument("--check", action="store_true", help="with --render: fail when the docs are stale")
    ns = parser.parse_args(argv)
    if ns.render:
        return render_docs(ns.csv, DOCS, ns.check)
    with tempfile.TemporaryDirectory() as tmp:
        trace = Path(ns.trace) if ns.trace else Path(tmp) / "trace.json.gz"
        if not ns.trace:
            from gen_big_trace import write_trace
            write_trace(trace, kernels=ns.kernels)
        new = run_studies(trace, ns.kernels, ns.repeat)
    old = pd.read_csv(ns.csv) if ns.csv.exists() else pd.DataFrame(columns=new.columns)
    write_csv_atomic(upsert_rows(old, new, KEY).sort_values(KEY), ns.csv)
    print(f"wrote {ns.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
