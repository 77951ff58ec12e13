"""`advisor profile --nproc-per-node N`: run the ranks through torch.distributed.run, merge them.

    python -m torch.distributed.run --standalone --nproc-per-node N \\
        -m kernel_advisor.distributed.worker SETTINGS.json

Ranks write rank<r>/ into the run's temporary directory (RunWriter), so the run appears,
and `latest` moves, only once every rank succeeded and the merge is written. Rank output
goes to <logs>/rank<r>.log in a temporary directory; a failing rank becomes one error
line naming the rank, and the logs are kept when they are the only clue.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kernel_advisor.collect.options import check_count, resolve_device
from kernel_advisor.collect.rundir import RunWriter, default_run_dir
from kernel_advisor.distributed.assemble import assemble_run, check_ranks_complete
from kernel_advisor.distributed.nodes import write_node_record
from kernel_advisor.distributed.rank_output import RANK_FILES
from kernel_advisor.distributed.rendezvous import Rendezvous, check_rendezvous
from kernel_advisor.distributed.worker import WorkerSettings, log_path
from kernel_advisor.errors import AdvisorError, CorrectnessError, EnvironmentCapabilityError, ExitCode, UserInputError
from kernel_advisor.analyze.calibrate import NCCL_SAFE_ENV
from kernel_advisor.records.base import json_text
from kernel_advisor.records.node import SCHEMA_VERSION as NODE_SCHEMA_VERSION

Progress = Callable[[str, int, int], None]
POLL_S = 0.2
TERMINATE_GRACE_S = 10.0
_ERROR_OF_CODE = {int(ExitCode.USER_INPUT): UserInputError, int(ExitCode.ENVIRONMENT): EnvironmentCapabilityError,
                  int(ExitCode.CORRECTNESS): CorrectnessError}


@dataclass(frozen=True)
class DistributedRequest:
    model: Path
    entry: str | None
    device: str  # "auto", "cuda" or "cpu"
    mode: str
    dtype: str
    warmup: int
    steps: int
    seed: int
    nproc_per_node: int
    fsdp: bool
    rendezvous: Rendezvous = Rendezvous()  # nnodes > 1: this agent is one node of the job


def check_request(req: DistributedRequest) -> None:
    check_rendezvous(req.rendezvous)
    check_count("--nproc-per-node", req.nproc_per_node, 1 if req.rendezvous.multi_node else 2,
                "drop the option to profile one process", why=" for a distributed run")
    path = Path(req.model)
    if not path.is_file() or path.suffix != ".py":
        raise UserInputError(f"model file {path} does not exist or is not a .py file", "check the path")


def torchrun_command(nproc: int, settings_path: Path, module: str = "kernel_advisor.distributed.worker",
                     rendezvous: Rendezvous = Rendezvous()) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", *rendezvous.torchrun_args(), "--nproc-per-node", str(nproc),
            "-m", module, str(settings_path)]


def child_env(base: dict[str, str]) -> dict[str, str]:
    """The ranks' environment: NVLink SHARP off (the GPU hosts need it) and this package importable."""
    env = {**base, **NCCL_SAFE_ENV}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, base.get("PYTHONPATH", "")) if p)
    return env


def _ranks_done(run_tmp: Path, nproc: int) -> int:
    """Ranks of this agent that wrote rank.json (on a node past the first, their global ranks start above 0)."""
    return len(list(run_tmp.glob(f"rank*/{RANK_FILES['rank']}")))


def _stop(proc: subprocess.Popen) -> None:
    """Stop torchrun and every rank (its own process group)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(TERMINATE_GRACE_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    except ProcessLookupError:
        pass


def run_ranks(cmd: list[str], env: dict[str, str], log_dir: Path, run_tmp: Path, nproc: int,
              report: Progress) -> int:
    """Run torchrun to completion, reporting finished ranks; returns its exit status."""
    with open(log_dir / "torchrun.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            while proc.poll() is None:
                report("profiling ranks", _ranks_done(run_tmp, nproc), nproc)
                time.sleep(POLL_S)
        except BaseException:
            _stop(proc)
            raise
    report("profiling ranks", _ranks_done(run_tmp, nproc), nproc)
    return proc.returncode


_EXCEPTION_LINE = re.compile(r"^[\w.]*(Error|Exception|Interrupt)\b.*\S")


def error_line(path: Path) -> str:
    """The last exception line of a log ("ModuleNotFoundError: ..."), else its last text line."""
    if not path.is_file():
        return ""
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8", errors="replace").splitlines()]
    lines = [ln for ln in lines if ln and ln.strip("=-*") and not ln.startswith("USDT:")]
    exceptions = [ln for ln in lines if _EXCEPTION_LINE.match(ln) and not ln.endswith("ChildFailedError:")]
    return (exceptions or lines or [""])[-1]


def rank_failure(log_dir: Path, nproc: int, returncode: int) -> tuple[AdvisorError, bool]:
    """(the error to show, whether the logs are worth keeping) after torchrun failed.

    The first rank to fail is the cause; peers it left waiting in a collective are
    stopped by torchrun or fail later, so the earliest error record wins.
    """
    records = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(log_dir.glob("rank*.error.json"))]
    if records:
        first = min(records, key=lambda rec: rec["time"])
        cls = _ERROR_OF_CODE.get(int(first["exit_code"]), AdvisorError)
        keep = cls is AdvisorError
        fix = first["fix"] + (f" (rank logs: {log_dir})" if keep else "")
        return cls(f"rank {first['rank']}: {first['problem']}", fix), keep
    for r in sorted(int(p.stem.removeprefix("rank")) for p in log_dir.glob("rank*.log")
                    if p.stem.removeprefix("rank").isdigit()):
        line = error_line(log_path(log_dir, r))
        if line:
            return AdvisorError(f"rank {r} exited with no result: {line}",
                                f"see {log_path(log_dir, r)}; rerun with --debug and report it"), True
    line = error_line(log_dir / "torchrun.log") or f"exit status {returncode}"
    return AdvisorError(f"the ranks failed before writing a result: {line}",
                        f"see {log_dir / 'torchrun.log'}"), True


def _settings(req: DistributedRequest, device: str, run_tmp: Path, log_dir: Path) -> WorkerSettings:
    return WorkerSettings(model=str(Path(req.model).resolve()), entry=req.entry, device=device, mode=req.mode,
                          dtype=req.dtype, warmup=req.warmup, steps=req.steps, seed=req.seed, fsdp=req.fsdp,
                          nproc_per_node=req.nproc_per_node, run_tmp=str(run_tmp), log_dir=str(log_dir),
                          nnodes=req.rendezvous.nnodes)


def profile_distributed(req: DistributedRequest, out_dir: Path,
                        progress: Progress | None = None) -> tuple[Path, dict]:
    """Profile every rank and write the merged run to `out_dir`; returns (run dir, run.json)."""
    check_request(req)
    device = resolve_device(req.device, gpus=req.nproc_per_node).type
    report = progress or (lambda phase, done, total: None)
    log_dir = Path(tempfile.mkdtemp(prefix="advisor-ranks-"))
    keep_logs = False
    try:
        multi_node = req.rendezvous.multi_node
        writer = RunWriter(out_dir, update_latest=not multi_node)  # a node's directory is no run on its own
        with writer as run_tmp:
            settings_path = log_dir / "settings.json"
            _settings(req, device, run_tmp, log_dir).write(settings_path)
            command = torchrun_command(req.nproc_per_node, settings_path, rendezvous=req.rendezvous)
            code = run_ranks(command, child_env(dict(os.environ)), log_dir, run_tmp, req.nproc_per_node, report)
            if code != 0:
                error, keep_logs = rank_failure(log_dir, req.nproc_per_node, code)
                raise error
            if multi_node:
                meta = write_node_record(run_tmp, req.nproc_per_node, req.rendezvous, str(req.model))
            else:
                check_ranks_complete(run_tmp, req.nproc_per_node)
                meta = assemble_run(run_tmp, req.nproc_per_node)
        return writer.final, meta  # a default name taken meanwhile moved to the next free one
    finally:
        if not keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)


@dataclass(frozen=True)
class NodeDir:
    """One node's directory of a multi-node job, for `advisor merge` (api.merge_nodes)."""

    path: Path
    node: dict  # records/node.py NodeRecord: node_rank, nnodes, ranks, world_size, hostname

    def to_json(self) -> str:
        return json_text({"node_dir": str(self.path), "node": self.node}, NODE_SCHEMA_VERSION)


def profile_ranks(req: DistributedRequest, out_dir: Path | None, progress: Progress | None = None) -> Path | NodeDir:
    """`advisor profile --nproc-per-node N`: the run's directory; with `--nnodes N`, this node's NodeDir
    (default names: MODEL-TIME, MODEL-nodeR-TIME)."""
    r = req.rendezvous
    name = f"{req.model.stem}-node{r.node_rank if r.node_rank is not None else 'x'}" if r.multi_node else req.model.stem
    path, meta = profile_distributed(req, out_dir or default_run_dir(name), progress)
    return NodeDir(path, meta) if r.multi_node else path
