"""`recommend --measure` on a distributed run: its data-parallel actions, measured on its ranks.

    python -m torch.distributed.run --standalone --nproc-per-node N \\
        -m kernel_advisor.distributed.measure_worker SETTINGS.json

The ranks re-create the run (its model file, device, dtype, seed and wrapping: run.json
"args" and "distributed"), measure each action against the run's own wrapping
(measure_worker.py), and rank 0 writes distributed_experiments.json into the run directory.
Actions that change another wrapper than the run's are answered without launching anything.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from kernel_advisor.actions.data_parallel import WRAPPER
from kernel_advisor.collect.loop_timing import Estimate
from kernel_advisor.collect.options import resolve_device
from kernel_advisor.distributed.launch import child_env, rank_failure, run_ranks, torchrun_command
from kernel_advisor.distributed.measure_worker import MeasureSettings
from kernel_advisor.errors import AdvisorError, UserInputError
from kernel_advisor.experiment.trial import Outcome
from kernel_advisor.records.distributed_experiments import FILE, DistributedExperimentsRecord
from kernel_advisor.records.run import RunMeta

MODULE = "kernel_advisor.distributed.measure_worker"
DRAWS, WARMUP, WINDOWS = 2, 3, 12


def run_wrapper(meta: Mapping[str, Any]) -> str | None:
    """The wrapper a distributed run's ranks used; None for a single-process run."""
    info = RunMeta.of(meta).distributed
    return info.get("wrapper") if (info.get("world_size") or 0) >= 2 else None


def settings_for(meta: Mapping[str, Any], run_dir: Path, actions: Sequence[str], budget_s: float | None,
                 log_dir: Path) -> MeasureSettings:
    meta = RunMeta.of(meta)
    model, args = meta.model, meta.args
    path = Path(model.get("file") or "")
    if not path.is_file():
        raise UserInputError(f"--measure needs the model file, and run.json names {path}, which is not here",
                             "run from the machine and directory you profiled on")
    return MeasureSettings(
        model=str(path.resolve()), entry=model.get("entry"),
        device=resolve_device(args.get("device") or "auto", gpus=int(args["nproc_per_node"])).type,
        dtype=args.get("dtype") or "keep", seed=int(args.get("seed") or 0), fsdp=bool(args.get("fsdp")),
        wrapper=run_wrapper(meta), actions=tuple(actions), draws=DRAWS, warmup=WARMUP, windows=WINDOWS,
        budget_s=budget_s, out=str(Path(run_dir) / FILE), log_dir=str(log_dir))


def outcome_of(trial: Mapping[str, Any]) -> Outcome:
    """A record trial back as the Outcome every other measurement is reported as."""
    def est(d):
        return None if d is None else Estimate(*(float("nan") if d[k] is None else d[k]
                                                 for k in ("value", "low", "high")))
    return Outcome(trial["status"], trial["reason"], trial["applied"], speedup=est(trial["speedup"]),
                   gain_frac=trial["gain_frac"], verdict=trial["verdict"], step_s=est(trial["step_s"]),
                   gate=trial["gate"])


def measure_distributed(meta: Mapping[str, Any], run_dir: Path, actions: Sequence[str],
                        budget_s: float | None = None) -> dict[str, Outcome]:
    """Per action, what it measured on the run's ranks (every name in `actions` answered)."""
    wrapper = run_wrapper(meta)
    out = {a: Outcome("not-applied", f"the run's ranks were wrapped by {wrapper}; {a} changes {WRAPPER[a]}")
           for a in actions if WRAPPER[a] != wrapper}
    todo = [a for a in actions if a not in out]
    if not todo:
        return out
    nproc = int(RunMeta.of(meta).distributed["world_size"])
    log_dir = Path(tempfile.mkdtemp(prefix="advisor-measure-ranks-"))
    keep_logs = False
    try:
        settings_path = log_dir / "settings.json"
        settings_for(meta, run_dir, todo, budget_s, log_dir).write(settings_path)
        code = run_ranks(torchrun_command(nproc, settings_path, MODULE), child_env(dict(os.environ)), log_dir,
                         log_dir, nproc, lambda *a: None)
        if code != 0:
            error, keep_logs = rank_failure(log_dir, nproc, code)
            raise error
        record = DistributedExperimentsRecord.read(run_dir)
        if record is None:
            raise AdvisorError(f"the ranks exited 0 without writing {FILE}", "rerun with --debug and report it")
        out.update({t["action"]: outcome_of(t) for t in record.trials})
    finally:
        if not keep_logs:
            shutil.rmtree(log_dir, ignore_errors=True)
    return out
