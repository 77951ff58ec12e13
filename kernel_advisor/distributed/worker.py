"""One rank of `advisor profile --nproc-per-node N`.

    python -m kernel_advisor.distributed.worker SETTINGS.json

torch.distributed.run starts one per rank with RANK, LOCAL_RANK and WORLD_SIZE set. The
rank joins the process group (NCCL on GPU r, gloo on CPU), loads and wraps the model,
profiles its own steps and writes rank<r>/ into the run's temporary directory, rank.json
last. Its stdout and stderr go to <log_dir>/rank<r>.log; a failure is also written as
<log_dir>/rank<r>.error.json, which the launcher turns into one error line.
"""
from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from kernel_advisor.collect.loader import load_model
from kernel_advisor.collect.nvtx_mirror import mirror_user_nvtx
from kernel_advisor.collect.profiler import capture
from kernel_advisor.distributed.links import measure_group_allreduce
from kernel_advisor.distributed.rank_output import write_rank_dir
from kernel_advisor.distributed.wrap import wrap_model
from kernel_advisor.errors import AdvisorError, ExitCode


@dataclass(frozen=True)
class WorkerSettings:
    """What every rank needs, written by the launcher as JSON."""

    model: str
    entry: str | None
    device: str  # "cuda" or "cpu", already resolved
    mode: str
    dtype: str
    warmup: int
    steps: int
    seed: int
    fsdp: bool
    nproc_per_node: int
    run_tmp: str  # the run's temporary directory: ranks write rank<r>/ here
    log_dir: str  # rank<r>.log and rank<r>.error.json
    nnodes: int = 1  # > 1: this agent runs one node of a multi-node job

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self), indent=2), encoding="utf-8")

    @staticmethod
    def read(path: Path) -> "WorkerSettings":
        return WorkerSettings(**json.loads(Path(path).read_text(encoding="utf-8")))


@dataclass(frozen=True)
class RankEnv:
    rank: int
    local_rank: int
    world_size: int


def node_info(environ=os.environ) -> dict:
    """The node this rank runs on: torchrun's GROUP_RANK (the node rank) and LOCAL_WORLD_SIZE."""
    return {"node_rank": int(environ.get("GROUP_RANK", 0)),
            "local_world_size": int(environ.get("LOCAL_WORLD_SIZE", environ.get("WORLD_SIZE", 1))),
            "hostname": socket.gethostname()}


def rank_env(environ=os.environ) -> RankEnv:
    """The rank torchrun assigned (a plain `python -m` run is rank 0 of 1)."""
    return RankEnv(int(environ.get("RANK", 0)), int(environ.get("LOCAL_RANK", 0)),
                   int(environ.get("WORLD_SIZE", 1)))


def log_path(log_dir: str | Path, rank: int) -> Path:
    return Path(log_dir) / f"rank{rank}.log"


def error_path(log_dir: str | Path, rank: int) -> Path:
    return Path(log_dir) / f"rank{rank}.error.json"


def _redirect_output(path: Path) -> None:
    """Everything this rank prints, Python or C++ (NCCL, gloo), goes to its log file."""
    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def rank_device(device_type: str, local_rank: int) -> torch.device:
    if device_type == "cuda":
        torch.cuda.set_device(local_rank)  # "cuda" without an index now means this rank's GPU
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def profile_rank(settings: WorkerSettings, env: RankEnv) -> None:
    dev = rank_device(settings.device, env.local_rank)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend)
    with mirror_user_nvtx():
        loaded = load_model(settings.model, entry=settings.entry, device=settings.device,
                            dtype=settings.dtype, seed=settings.seed)
    loaded = dataclasses.replace(loaded, device=dev)
    model, wrapper = wrap_model(loaded, settings.mode, settings.fsdp)
    loaded = dataclasses.replace(loaded, model=model)
    with tempfile.TemporaryDirectory(prefix=f"advisor-rank{env.rank}-") as work:
        cap = capture(loaded, settings.mode, settings.warmup, settings.steps, Path(work))
        info = {"rank": env.rank, "local_rank": env.local_rank, "world_size": env.world_size,
                "backend": backend, "wrapper": wrapper, "device": str(dev)}
        if settings.nnodes > 1:  # every rank takes part, after its own profiled steps
            info.update(node_info(), internode_allreduce=measure_group_allreduce(dev, settings.nnodes))
        write_rank_dir(Path(settings.run_tmp) / f"rank{env.rank}", loaded, _args(settings), cap, info)


def _args(settings: WorkerSettings) -> dict:
    """run.json "args", as `advisor profile` records them, plus the distributed options."""
    return {"device": settings.device, "mode": settings.mode, "dtype": settings.dtype,
            "warmup": settings.warmup, "steps": settings.steps, "seed": settings.seed,
            "entry": settings.entry, "nproc_per_node": settings.nproc_per_node, "fsdp": settings.fsdp,
            "nnodes": settings.nnodes}


def _record_failure(settings: WorkerSettings, env: RankEnv, exc: BaseException) -> int:
    traceback.print_exc()  # into the rank's log, for --debug and bug reports
    if isinstance(exc, AdvisorError):
        problem, fix, code = exc.problem, exc.fix, int(exc.exit_code)
    else:
        problem = f"internal error: {type(exc).__name__}: {exc}"
        fix, code = "rerun with --debug and report it", int(ExitCode.INTERNAL)
    record = {"rank": env.rank, "problem": problem, "fix": fix, "exit_code": code, "time": time.time()}
    error_path(settings.log_dir, env.rank).write_text(json.dumps(record), encoding="utf-8")
    return code


def run_rank(settings, work) -> int:
    """One rank's process: its output to its log, `work(settings, env)`, and any failure written
    as a record the launcher reads; the exit code."""
    env = rank_env()
    _redirect_output(log_path(settings.log_dir, env.rank))
    try:
        work(settings, env)
    except BaseException as e:  # noqa: BLE001 - every failure must reach the launcher as a record
        # No destroy_process_group here: peers may still wait in a collective, and torchrun
        # stops them once this process exits.
        return _record_failure(settings, env, e)
    dist.destroy_process_group()
    return 0


def rank_main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return run_rank(WorkerSettings.read(Path(argv[0])), profile_rank)


if __name__ == "__main__":
    sys.exit(rank_main())
