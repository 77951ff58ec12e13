"""Per-rank summaries in parallel worker processes: each reads one trace at a time and sends
back its RankSummary (a few kB), so memory is bounded by `workers` traces, not by the ranks.

Plain subprocesses (as collect/trace/pool.py, for the same reasons: multiprocessing's spawn
re-imports the caller's __main__, fork copies the threads CUDA or a profiler left running).
Jobs go out and results come back as JSON lines; a worker's bad-input error comes back as
its problem and fix, named after the rank and file, and stops the import.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import traceback
from pathlib import Path
from typing import Callable, Sequence

from kernel_advisor.distributed.rank_files import RankFile
from kernel_advisor.distributed.rank_summary import RankSummary, summarize_trace
from kernel_advisor.errors import AdvisorError, EnvironmentCapabilityError, ExitCode, UserInputError

MAX_WORKERS = 8
_WORKER_CODE = "from kernel_advisor.distributed.summary_pool import worker_main; worker_main()"
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
