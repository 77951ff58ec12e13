"""experiments.json: what `recommend --measure`'s search explored, pruned and chose.

Rewritten (atomically) after every decision, so an interrupted or timed-out search still
leaves a complete record of what it measured: `complete` says whether the search ended.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernel_advisor.records.base import check_record, read_json, strict

FILE = "experiments.json"
SCHEMA_VERSION = 1
RERUN = "`advisor recommend --measure`"
REQUIRED = ("complete", "interrupted", "budget_s", "elapsed_s", "regime", "eager_step_s", "eager_sync_step_s",
            "log", "explored", "pruned", "skipped", "trials", "plan")
TRIAL_KEYS = ("config", "phase", "status", "reason", "applied", "speedup", "gain_frac", "verdict", "step_s",
              "windows", "prepare_s", "pruned")


@dataclass(frozen=True)
class ExperimentsRecord:
    complete: bool  # the search ended (not interrupted, not stopped by an error)
    interrupted: bool  # Ctrl-C (or a signal) stopped it
    budget_s: float | None
    elapsed_s: float
    regime: str  # what the step figures are (collect/loop_timing.py)
    eager_step_s: dict | None  # {value, low, high}, back-to-back
    eager_sync_step_s: dict | None  # {value, low, high}, synchronized steps
    log: str | None  # the compilers' log file, relative to the run directory
    trials: tuple[dict, ...]  # one per configuration, in the order they were decided
    plan: dict | None  # {"config": ..., "speedup": ...}: the fastest finalist, None when nothing won

    @property
    def explored(self) -> int:
        return sum(1 for t in self.trials if t["windows"] > 0)

    @property
    def pruned(self) -> int:
        return sum(1 for t in self.trials if t["pruned"])

    @property
    def skipped(self) -> int:
        return sum(1 for t in self.trials if t["windows"] == 0)

    def to_json(self) -> dict[str, Any]:
        return strict({"schema_version": SCHEMA_VERSION, "complete": self.complete, "interrupted": self.interrupted,
                       "budget_s": self.budget_s, "elapsed_s": self.elapsed_s, "regime": self.regime,
                       "eager_step_s": self.eager_step_s, "eager_sync_step_s": self.eager_sync_step_s,
                       "log": self.log, "explored": self.explored, "pruned": self.pruned, "skipped": self.skipped,
                       "trials": list(self.trials), "plan": self.plan})

    @classmethod
    def from_json(cls, doc: Any, source: str | Path = FILE) -> "ExperimentsRecord":
        check_record(doc, source, SCHEMA_VERSION, REQUIRED, RERUN)
        for i, t in enumerate(doc["trials"]):
            check_record({"schema_version": SCHEMA_VERSION, **t}, f"{source} trial {i}", SCHEMA_VERSION,
                         TRIAL_KEYS, RERUN)
        return cls(complete=bool(doc["complete"]), interrupted=bool(doc["interrupted"]), budget_s=doc["budget_s"],
                   elapsed_s=float(doc["elapsed_s"]), regime=str(doc["regime"]), eager_step_s=doc["eager_step_s"],
                   eager_sync_step_s=doc["eager_sync_step_s"], log=doc["log"], trials=tuple(doc["trials"]),
                   plan=doc["plan"])

    @classmethod
    def read(cls, run_dir: Path) -> "ExperimentsRecord | None":
        path = Path(run_dir) / FILE
        return cls.from_json(read_json(path, RERUN), path) if path.is_file() else None
