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
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from kernel_advisor.actions.data_parallel import repeated_blocks, shard_blocks
from kernel_advisor.collect.loader import LoadedModel, load_model, out_of_memory_error, user_code_error
from kernel_advisor.collect.nvtx_ranges import mirror_user_nvtx
from kernel_advisor.collect.profiler import capture
from kernel_advisor.distributed.links import measure_group_allreduce
from kernel_advisor.distributed.rank_output import write_rank_dir
from kernel_advisor.errors import AdvisorError, ExitCode, UserInputError


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


# ------------------------------------------------------------
# Wrap the user's model for data-parallel training: their own wrapping, DDP, or FSDP2.
#
# A model file may define `wrap_distributed(model) -> model` (called on every rank after
# the process group exists and the model is on the rank's device); it wins over DDP/FSDP
# and runs in both modes. Otherwise train mode wraps in DistributedDataParallel, or with
# --fsdp shards with FSDP2 `fully_shard`; inference runs the bare model on every rank.

USER_HOOK = "wrap_distributed"


def wrap_model(loaded: LoadedModel, mode: str, fsdp: bool) -> tuple[Any, str]:
    """(model to run, how it was wrapped: "user", "ddp", "fsdp" or "none")."""
    hook = getattr(loaded.module, USER_HOOK, None)
    if hook is not None:
        return _user_wrapped(loaded, hook), "user"
    if mode != "train":
        return loaded.model, "none"
    model = _trainable_module(loaded)
    try:
        if fsdp:
            return shard_fsdp(model, loaded.device.type), "fsdp"
        return wrap_ddp(model, loaded.device), "ddp"
    except torch.OutOfMemoryError as e:
        raise out_of_memory_error("wrapping the model for data parallelism") from e


def _user_wrapped(loaded: LoadedModel, hook: Any) -> Any:
    name = loaded.path.name
    if not callable(hook):
        raise UserInputError(f"{name}: {USER_HOOK} is not callable",
                             f"define `def {USER_HOOK}(model): return wrapped_model`")
    try:
        wrapped = hook(loaded.model)
    except Exception as e:  # noqa: BLE001 - reported at the user's own frame
        raise user_code_error(loaded.path, f"calling {USER_HOOK}(model)", e) from e
    if not callable(wrapped):
        raise UserInputError(f"{name}: {USER_HOOK}(model) returned {type(wrapped).__name__}, not a model",
                             "return the wrapped model (e.g. DistributedDataParallel(model))")
    return wrapped


def _trainable_module(loaded: LoadedModel) -> nn.Module:
    model = loaded.model
    if not isinstance(model, nn.Module):
        raise UserInputError(f"{loaded.path.name}: the model is a {type(model).__name__}; DDP needs an nn.Module",
                             f"return an nn.Module, or define {USER_HOOK}(model) in the file")
    if not any(p.requires_grad for p in model.parameters()):
        raise UserInputError(f"{loaded.path.name}: the model has no trainable parameters, so there is "
                             "nothing for data parallelism to synchronise",
                             "use --mode inference, or profile a model with parameters")
    return model


def wrap_ddp(model: nn.Module, device: torch.device) -> nn.Module:
    """DistributedDataParallel with PyTorch's defaults (25 MiB gradient buckets)."""
    ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=ids)


def shard_fsdp(model: nn.Module, device_type: str) -> nn.Module:
    """FSDP2: each repeated block is its own shard group (all-gathered just before use), then the root."""
    shard_blocks(model, device_type)
    return model


if __name__ == "__main__":
    sys.exit(rank_main())
