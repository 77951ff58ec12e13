"""distributed_experiments.json: the data-parallel actions measured on a distributed run's ranks.

Written by rank 0 of `recommend --measure` on a `--nproc-per-node` run
(kernel_advisor/distributed/measure_worker.py): each action gated on every rank against the
run's own wrapping and timed in lockstep windows, interleaved with it. Times are the job's:
per window, the slowest rank's.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel_advisor.records.base import check_record, read_json, strict

FILE = "distributed_experiments.json"
SCHEMA_VERSION = 1
RERUN = "`advisor recommend --measure` on the distributed run"
REQUIRED = ("complete", "world_size", "backend", "wrapper", "regime", "steps_per_window", "windows",
            "baseline_step_s", "elapsed_s", "trials")
TRIAL_KEYS = ("action", "status", "reason", "applied", "speedup", "gain_frac", "verdict", "step_s", "gate",
              "windows")


@dataclass(frozen=True)
class DistributedExperimentsRecord:
    complete: bool  # every action was decided
    world_size: int
    backend: str  # nccl / gloo
    wrapper: str  # the run's wrapping every action is held against: ddp / fsdp
    regime: str  # what the step figures are
    steps_per_window: int
    windows: int  # rounds timed (every variant once per round)
    baseline_step_s: dict | None  # {value, low, high}: the run's own wrapping
    elapsed_s: float
    trials: tuple[dict, ...]  # one per action: Outcome.to_json() plus action and windows

    def to_json(self) -> dict[str, Any]:
        return strict({"schema_version": SCHEMA_VERSION, "complete": self.complete, "world_size": self.world_size,
                       "backend": self.backend, "wrapper": self.wrapper, "regime": self.regime,
                       "steps_per_window": self.steps_per_window, "windows": self.windows,
                       "baseline_step_s": self.baseline_step_s, "elapsed_s": self.elapsed_s,
                       "trials": list(self.trials)})

    @classmethod
    def from_json(cls, doc: Any, source: str | Path = FILE) -> "DistributedExperimentsRecord":
        check_record(doc, source, SCHEMA_VERSION, REQUIRED, RERUN)
        for i, t in enumerate(doc["trials"]):
            check_record({"schema_version": SCHEMA_VERSION, **t}, f"{source} trial {i}", SCHEMA_VERSION,
                         TRIAL_KEYS, RERUN)
        return cls(complete=bool(doc["complete"]), world_size=int(doc["world_size"]), backend=str(doc["backend"]),
                   wrapper=str(doc["wrapper"]), regime=str(doc["regime"]),
                   steps_per_window=int(doc["steps_per_window"]), windows=int(doc["windows"]),
                   baseline_step_s=doc["baseline_step_s"], elapsed_s=float(doc["elapsed_s"]),
                   trials=tuple(doc["trials"]))

    @classmethod
    def read(cls, run_dir: Path) -> "DistributedExperimentsRecord | None":
        path = Path(run_dir) / FILE
        return cls.from_json(read_json(path, RERUN), path) if path.is_file() else None
