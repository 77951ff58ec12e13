"""`advisor import DIR/`: a directory of per-rank torch.profiler traces as one run.

As HTA's multi-rank TraceAnalysis: find each file's rank (rank_files), reduce every trace
to a small summary in worker processes (summary_pool: never two traces per worker, never
all of them in memory), then merge: stragglers, communication per rank, and the skew of
each collective call across ranks. Rank 0's trace is imported whole as the run's main
tables (as `advisor profile --nproc-per-node` makes rank 0's tables the run's), so
recommend, report and compare read the run unchanged.
"""
from __future__ import annotations

import json
import math
import os
import queue
import subprocess
import sys
import threading
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import pandas as pd

from kernel_advisor.collect.nesting import step_windows
from kernel_advisor.collect.rundir import write_json_atomic, write_table
from kernel_advisor.collect.trace import read_trace
from kernel_advisor.distributed.assemble import RANKS_FILE, json_clean, merged_sections, rank_dir_name
from kernel_advisor.distributed.comms import (COMM_COLUMNS, Overlap, comm_calls, comm_overlap, compute_intervals_us,
                                              covered_length, windows_array)
from kernel_advisor.distributed.links import bus_ceiling
from kernel_advisor.distributed.merge import (Merged, RankResult, call_spreads, lateness_table, merge_ranks,
                                              numbered_calls, skew_frame)
from kernel_advisor.distributed.rank_files import RankFile, rank_files
from kernel_advisor.distributed.rank_output import call_spans_us
from kernel_advisor.errors import AdvisorError, EnvironmentCapabilityError, ExitCode, UserInputError
from kernel_advisor.pipeline import import_to_run
from kernel_advisor.records.run import RunMeta

COMMS_FILE = "comms.csv"


def backend_of(files: list[RankFile], summaries: list[RankSummary]) -> str:
    named = next((f.backend for f in files if f.backend), "")
    return named or ("nccl" if summaries[0].device_type == "cuda" else "gloo")


def skew_document(summaries: list[RankSummary]) -> dict:
    """Per collective start/end spread across ranks and per rank lateness; empty when calls do not line up."""
    numbered, aligned = numbered_calls([s.result() for s in summaries])
    if not aligned or not len(numbered):
        return {"calls_aligned": aligned, "collectives": [], "ranks": []}
    spreads = call_spreads(numbered)
    late = lateness_table(numbered, spreads, [s.rank for s in summaries])
    return {"calls_aligned": True, "collectives": skew_frame(spreads).to_dict("records"),
            "ranks": late.to_dict("records")}


def import_document(merged: Merged, files: list[RankFile], summaries: list[RankSummary], backend: str,
                    ceiling, directory: Path) -> dict:
    ranks = []
    for row, f, s in zip(merged.ranks.to_dict("records"), files, summaries):
        ranks.append({**row, "device": s.device_type, "device_name": s.device_name, "step_wall_s": s.step_wall_s,
                      "source_trace": str(f.path.relative_to(directory)), "rank_from": f.rank_from,
                      "files": {"comms": f"{rank_dir_name(s.rank)}/{COMMS_FILE}"}})
    return json_clean({"world_size": merged.world_size, "backend": backend, "wrapper": "unknown", "source": "import",
                       "source_dir": str(directory), **merged_sections(merged, ranks, ceiling),
                       "skew": skew_document(summaries)})


def import_rank_dir(directory: Path, args: dict, out_dir: Path, workers: int | None = None,
                    progress: Progress | None = None) -> tuple[Path, dict]:
    """Merge the per-rank traces of `directory` into a run at `out_dir`; returns (run dir, run.json)."""
    directory = Path(directory)
    files = rank_files(directory)
    summaries = summarize_ranks(files, len(files), workers, progress)
    first = summaries[0]
    ceiling = bus_ceiling(first.device_type, first.device_name, "")
    merged = merge_ranks([s.result() for s in summaries], ceiling.bytes_per_s)
    backend = backend_of(files, summaries)
    doc = import_document(merged, files, summaries, backend, ceiling, directory)

    def finish(tmp: Path, meta: dict) -> None:
        for s in summaries:
            (tmp / rank_dir_name(s.rank)).mkdir()
            write_table(tmp / rank_dir_name(s.rank) / COMMS_FILE, s.calls_frame())
        write_json_atomic(tmp / RANKS_FILE, doc)
        meta.update(distributed=json_clean({**merged.evidence, "backend": backend, "wrapper": "unknown",
                                            "bus_ceiling_source": ceiling.source, "bus_link": ceiling.link}),
                    files={**RunMeta.of(meta).files, "ranks": RANKS_FILE})

    args = {**args, "source_trace": str(files[0].path), "source_dir": str(directory), "world_size": len(files)}
    return import_to_run(files[0].path, args, out_dir, finish)


# ------------------------------------------------------------
# One rank's trace reduced to what the multi-rank merge needs: step times, device busy,
# its collective calls and their overlap with compute. A few kB per rank, whatever the trace's
# size, so 64 or more ranks merge without ever holding two traces at once.

@dataclass(frozen=True)
class RankSummary:
    rank: int
    file: str
    device_type: str  # "cuda" when the trace holds GPU kernels, else "cpu"
    device_name: str
    steps: int
    step_wall_s: tuple[float, ...]  # per step window (ProfilerStep#N), in trace order
    device_busy_s: float  # union of compute and communication intervals in the steps
    overlap: dict  # Overlap's fields
    calls: tuple[tuple, ...]  # COMM_COLUMNS rows

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(data: dict) -> "RankSummary":
        return RankSummary(**{**data, "step_wall_s": tuple(data["step_wall_s"]),
                              "calls": tuple(tuple(c) for c in data["calls"])})

    def calls_frame(self) -> pd.DataFrame:
        frame = pd.DataFrame(list(self.calls), columns=list(COMM_COLUMNS))
        for column in ("ts_us", "dur_us", "bytes"):  # None (unknown size) back to NaN
            frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
        return frame

    def result(self) -> RankResult:
        """The merge's view (distributed.merge.RankResult)."""
        return RankResult(rank=self.rank, steps=self.steps, step_wall_s=self.step_wall_s,
                          device_busy_s=self.device_busy_s, calls=self.calls_frame(),
                          overlap=Overlap(**{k: math.nan if v is None else v for k, v in self.overlap.items()}))


def device_name(trace_meta: dict, device_type: str) -> str:
    """The GPU's name from a kineto trace's metadata (its deviceProperties)."""
    props = trace_meta.get("deviceProperties")
    if device_type == "cuda" and isinstance(props, list) and props and isinstance(props[0], dict):
        return str(props[0].get("name", "GPU"))
    return "cpu" if device_type == "cpu" else "GPU"


def summarize_trace(path: Path, rank: int, world_size: int) -> RankSummary:
    """Read one rank's trace (in this process) and reduce it to its RankSummary."""
    trace = read_trace(path, workers=1)  # NB: one process per rank already; no pool inside it
    device_type = "cuda" if len(trace.gpu) else "cpu"
    steps = step_windows(trace)
    windows = windows_array(steps)
    calls = comm_calls(trace, world_size, windows)
    comm = call_spans_us(calls)
    compute = compute_intervals_us(trace, windows, device_type)
    overlap = comm_overlap(comm, compute)
    origin = float(windows[0, 0]) if len(windows) else 0.0  # ~1e12 µs: subtract before summing lengths
    busy_s = covered_length(np.concatenate([comm, compute]) - origin) * 1e-6
    step_wall_s = tuple(float(s) for s in (windows[:, 1] - windows[:, 0]) * 1e-6)
    overlap_doc = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(overlap).items()}
    rows = tuple(tuple(_plain(v) for v in row) for row in calls.itertuples(index=False))
    return RankSummary(rank=rank, file=str(path), device_type=device_type,
                       device_name=device_name(trace.meta, device_type), steps=len(step_wall_s),
                       step_wall_s=step_wall_s, device_busy_s=busy_s, overlap=overlap_doc, calls=rows)


def _plain(value):
    """numpy scalars as Python values, NaN as None: the summary crosses a pipe as JSON."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


# ------------------------------------------------------------
# Per-rank summaries in parallel worker processes: each reads one trace at a time and sends
# back its RankSummary (a few kB), so memory is bounded by `workers` traces, not by the ranks.
#
# Plain subprocesses (as collect/trace/pool.py, for the same reasons: multiprocessing's spawn
# re-imports the caller's __main__, fork copies the threads CUDA or a profiler left running).
# Jobs go out and results come back as JSON lines; a worker's bad-input error comes back as
# its problem and fix, named after the rank and file, and stops the import.

MAX_WORKERS = 8
_WORKER_CODE = "from kernel_advisor.distributed.import_ranks import worker_main; worker_main()"
_ERRORS = {int(ExitCode.USER_INPUT): UserInputError, int(ExitCode.ENVIRONMENT): EnvironmentCapabilityError}
Progress = Callable[[str, int, int], None]


def default_workers(n_ranks: int) -> int:
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS, n_ranks))


def summarize_ranks(files: Sequence[RankFile], world_size: int, workers: int | None = None,
                    progress: Progress | None = None) -> list[RankSummary]:
    """RankSummary per file, in rank order, read by `workers` processes (default: one per CPU, at most 8);
    one worker reads in this process, one trace after the other."""
    n = workers or default_workers(len(files))
    if n == 1:
        return [_here(f, world_size, i, len(files), progress) for i, f in enumerate(files)]
    jobs: queue.Queue = queue.Queue()
    for f in files:
        jobs.put(f)
    results: dict[int, RankSummary] = {}
    failures: list[AdvisorError] = []
    lock = threading.Lock()
    report = progress or (lambda phase, done, total: None)

    def serve() -> None:
        proc = _start_worker()
        try:
            while not failures:
                try:
                    f = jobs.get_nowait()
                except queue.Empty:
                    return
                outcome = _ask(proc, f, world_size)
                with lock:
                    if isinstance(outcome, AdvisorError):
                        failures.append(outcome)
                        return
                    results[f.rank] = outcome
                    report("reading rank traces", len(results), len(files))
        finally:
            proc.kill()
            proc.wait()
            proc.stdin.close()
            proc.stdout.close()

    threads = [threading.Thread(target=serve, daemon=True) for _ in range(min(n, len(files)))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    return [results[f.rank] for f in files]


def _here(f: RankFile, world_size: int, index: int, total: int, progress: Progress | None) -> RankSummary:
    try:
        summary = summarize_trace(f.path, f.rank, world_size)
    except AdvisorError as e:
        raise type(e)(f"rank {f.rank} ({f.path.name}): {e.problem}", e.fix) from None
    if progress is not None:
        progress("reading rank traces", index + 1, total)
    return summary


def _start_worker() -> subprocess.Popen:
    root = str(Path(__file__).resolve().parents[2])
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-c", _WORKER_CODE], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": path})


def _ask(proc: subprocess.Popen, f: RankFile, world_size: int) -> RankSummary | AdvisorError:
    job = {"path": str(f.path), "rank": f.rank, "world_size": world_size}
    try:
        proc.stdin.write((json.dumps(job) + "\n").encode())
        proc.stdin.flush()
        line = proc.stdout.readline()
    except (BrokenPipeError, OSError):
        line = b""
    where = f"rank {f.rank} ({f.path.name})"
    if not line:
        code = proc.wait()
        return EnvironmentCapabilityError(
            f"the process reading {where} died (exit {code}{': out of memory?' if code == -9 else ''})",
            "import with fewer workers (--workers 1), or on a machine with more memory")
    reply = json.loads(line)
    if "summary" in reply:
        return RankSummary.from_json(reply["summary"])
    err = reply["error"]
    cls = _ERRORS.get(err["exit_code"], AdvisorError)
    return cls(f"{where}: {err['problem']}", err["fix"])


def worker_main() -> None:
    """A worker: one JSON job per stdin line, one JSON reply per stdout line."""
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # stray prints from imports must not corrupt the reply stream
    for line in sys.stdin:
        job = json.loads(line)
        try:
            summary = summarize_trace(Path(job["path"]), job["rank"], job["world_size"])
            reply = {"summary": summary.to_json()}
        except AdvisorError as e:
            reply = {"error": {"problem": e.problem, "fix": e.fix, "exit_code": int(e.exit_code)}}
        except Exception as e:  # noqa: BLE001 - reported to the parent as an internal error
            reply = {"error": {"problem": f"internal error: {type(e).__name__}: {e}",
                               "fix": "rerun with --debug and report it: " + traceback.format_exc(limit=3)
                               .strip().splitlines()[-1], "exit_code": int(ExitCode.INTERNAL)}}
        replies.write(json.dumps(reply, allow_nan=False) + "\n")
        replies.flush()
