"""The experiment engine's entry: search the configurations of one model, record as it goes.

`measure_actions` takes the loaded model (the run's device, dtype, mode), the actions the
advice names (best predicted first), and the run directory. It searches (search.py) within
the budget, writes experiments.json after every decision, sends the compilers' logs to
measure.log, and returns what every single action measured alone and the plan: the fastest
configuration that measured faster than eager.
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence, TextIO

from kernel_advisor.collect.loader import LoadedModel
from kernel_advisor.collect.loop_timing import Estimate
from kernel_advisor.collect.rundir import write_json_atomic
from kernel_advisor.errors import UserInputError
from kernel_advisor.experiment.search import SearchOptions, SearchState, search
from kernel_advisor.experiment.trial import Outcome, Progress, Trial
from kernel_advisor.records.experiments import FILE, ExperimentsRecord
from kernel_advisor.trykernel.reference import prepare_reference


@dataclass(frozen=True)
class PlanResult:
    actions: tuple[str, ...]
    outcome: Outcome


@dataclass(frozen=True)
class SearchResult:
    outcomes: dict[str, Outcome]  # every configuration by name: singles are named as their action
    plan: PlanResult  # no actions (status not-applied) when nothing measured faster
    eager_step_s: Estimate | None  # back-to-back
    eager_sync_step_s: Estimate | None  # synchronized steps
    reference: str  # how the gate's reference was computed
    timing: str  # the regime, for people
    record: ExperimentsRecord
    steps_per_window: int = 0  # the back-to-back window the steps were timed in

    def to_json(self) -> dict:
        return {"eager_step_s": _interval(self.eager_step_s), "eager_sync_step_s": _interval(self.eager_sync_step_s),
                "reference": self.reference, "timing": self.timing, "steps_per_window": self.steps_per_window,
                "explored": self.record.explored,
                "pruned": self.record.pruned, "skipped": self.record.skipped, "elapsed_s": self.record.elapsed_s,
                "log": self.record.log}


def measure_actions(loaded: LoadedModel, mode: str, names: Sequence[str], options: SearchOptions = SearchOptions(),
                    busy_frac: float | None = None, run_dir: Path | None = None,
                    progress: Progress | None = None) -> SearchResult:
    report = progress or (lambda label, done, total: None)
    start = time.monotonic()
    reference = prepare_reference(loaded, mode)
    journal = _Journal(run_dir, options.budget_s, start)
    state = search(loaded, mode, names, options, reference, busy_frac, journal.write, report)
    record = journal.record(state)
    plan = _plan(state)
    return SearchResult({t.name: t.outcome for t in state.trials if t.outcome is not None}, plan, state.eager_s,
                    state.eager_sync_s, reference.reason, state.regime or "nothing was timed", record,
                    state.steps_per_window)


class _Journal:
    """experiments.json rewritten after every decision (nothing when there is no run directory)."""

    def __init__(self, run_dir: Path | None, budget_s: float | None, start: float) -> None:
        self.path = None if run_dir is None else Path(run_dir) / FILE
        self.log = LOG_FILE if run_dir is not None and (Path(run_dir) / LOG_FILE).exists() else None
        self.budget_s, self.start = budget_s, start

    def record(self, state: SearchState, interrupted: bool = False) -> ExperimentsRecord:
        best = state.plan or _provisional(state.trials)
        return ExperimentsRecord(
            complete=state.finished, interrupted=interrupted, budget_s=self.budget_s,
            elapsed_s=time.monotonic() - self.start, regime=state.regime, eager_step_s=_interval(state.eager_s),
            eager_sync_step_s=_interval(state.eager_sync_s), log=self.log,
            trials=tuple(_trial_json(t) for t in state.trials),
            plan=None if best is None else {"config": best.config.to_json(), **best.outcome.to_json()})

    def write(self, state: SearchState) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError, UserInputError):  # a full disk must not stop the measuring
                write_json_atomic(self.path, self.record(state, interrupted=not state.finished and _interrupted()).to_json())


def _interrupted() -> bool:
    return isinstance(sys.exc_info()[1], KeyboardInterrupt)


def _plan(state: SearchState) -> PlanResult:
    best = state.plan or _provisional(state.trials)
    if best is None:
        return PlanResult((), Outcome("not-applied", "no configuration measured faster than eager"))
    return PlanResult(best.config.parts, best.outcome)


def _provisional(trials: Sequence[Trial]) -> Trial | None:
    """The best trial measured faster so far: the plan of a search that has not ended."""
    faster = [t for t in trials if t.outcome is not None and t.outcome.verdict == "faster"]
    return max(faster, key=lambda t: t.outcome.speedup.value, default=None)


def _trial_json(t: Trial) -> dict:
    o = t.outcome or Outcome("not-measurable", "not decided")
    return {"config": t.config.to_json(), "phase": t.phase, **o.to_json(), "windows": t.windows,
            "prepare_s": t.prepare_s, "pruned": t.pruned}


def _interval(e: Estimate | None) -> dict | None:
    return None if e is None else e.to_json()


# ------------------------------------------------------------
# The compilers' chatter goes to a log file, never to the user's terminal.
#
# Inductor prints autotuning tables and `select_algorithm` errors, Dynamo and Triton log and
# warn, and compile workers (subprocesses) write to file descriptor 2 directly. While a search
# runs, all of it is sent to one file in the run directory: Python logging of the `torch` and
# `triton` loggers, Python warnings, and fd 2 itself. The caller gets a stream to the real
# stderr for its own lines (progress, warnings).

LOG_FILE = "measure.log"
LOGGERS = ("torch", "triton")


@contextlib.contextmanager
def compilers_to_log(path: Path) -> Iterator[TextIO]:
    """Everything but our own lines to `path` (appended); yields a stream to the real stderr."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", buffering=1, encoding="utf-8", errors="replace") as log, \
            _fd2_to(log) as terminal, _loggers_to(log), _warnings_to(log):
        yield terminal


@contextlib.contextmanager
def _fd2_to(log: TextIO) -> Iterator[TextIO]:
    sys.stderr.flush()
    saved = os.dup(2)
    terminal = os.fdopen(os.dup(saved), "w", buffering=1, encoding="utf-8", errors="replace")
    os.dup2(log.fileno(), 2)
    try:
        yield terminal
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        terminal.close()


@contextlib.contextmanager
def _loggers_to(log: TextIO) -> Iterator[None]:
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    saved = []
    for name in LOGGERS:
        logger = logging.getLogger(name)
        saved.append((logger, list(logger.handlers), logger.propagate))
        logger.handlers = [handler]
        logger.propagate = False
    try:
        yield
    finally:
        for logger, handlers, propagate in saved:
            logger.handlers, logger.propagate = handlers, propagate


@contextlib.contextmanager
def _warnings_to(log: TextIO) -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.simplefilter("default")

        def show(message, category, filename, lineno, file=None, line=None):  # noqa: ARG001 - warnings' hook
            log.write(warnings.formatwarning(message, category, filename, lineno, line))

        warnings.showwarning = show
        yield
