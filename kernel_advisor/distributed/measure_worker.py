"""One rank of `recommend --measure` on a distributed run: data-parallel actions, gated and timed.

    python -m kernel_advisor.distributed.measure_worker SETTINGS.json

torch.distributed.run starts one per rank. Every rank loads the model as the run did, prepares
each action (a copy of the bare model wrapped with one option changed, actions/data_parallel.py),
then wraps the model itself the way the run did: the baseline. The gate runs each on fresh
input draws (a different draw per rank, so the gradient all-reduce has something to average)
and compares outputs and every gradient the rank holds (its shard, under FSDP) with the
baseline's; the ranks agree on each verdict. Those that pass are timed in lockstep windows
interleaved with the baseline (lockstep.py). Rank 0 writes distributed_experiments.json.
"""
from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
import torch.distributed as dist

from kernel_advisor.actions import NotApplicable, NotMeasurable, Variant, get_action
from kernel_advisor.actions.data_parallel import WRAPPER
from kernel_advisor.collect.loader import LoadedModel, load_model
from kernel_advisor.collect.loop_timing import (TimedStep, autorange_steps, interleaved_windows_s, max_over_ranks,
                                                median_ci, regime_label, speedup_ci, verdict)
from kernel_advisor.collect.rundir import write_json_atomic
from kernel_advisor.collect.runner import timed_loop
from kernel_advisor.distributed.worker import RankEnv, rank_device, run_rank
from kernel_advisor.distributed.worker import wrap_model
from kernel_advisor.experiment.trial import GateRecord
from kernel_advisor.experiment.trial import Outcome
from kernel_advisor.records.distributed_experiments import DistributedExperimentsRecord
from kernel_advisor.trykernel.candidates import default_tolerance
from kernel_advisor.trykernel.capture import Captured, capture_step, compare_captures

DRAW_RANK_STRIDE = 7919  # rank r's draw d uses seed + 1 + d + r * stride: distinct per rank and draw


@dataclass(frozen=True)
class MeasureSettings:
    model: str
    entry: str | None
    device: str  # "cuda" or "cpu", resolved
    dtype: str
    seed: int
    fsdp: bool  # the run's --fsdp: the baseline wraps as the run did
    wrapper: str  # the run's wrapper ("ddp", "fsdp", "user", "none")
    actions: tuple[str, ...]
    draws: int
    warmup: int
    windows: int
    budget_s: float | None  # rank 0 stops timing rounds past it
    out: str  # distributed_experiments.json, written by rank 0
    log_dir: str

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(dataclasses.asdict(self), indent=2), encoding="utf-8")

    @staticmethod
    def read(path: Path) -> "MeasureSettings":
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        return MeasureSettings(**{**doc, "actions": tuple(doc["actions"])})


@dataclass
class RankTrial:
    action: str
    variant: Variant | None = None
    outcome: Outcome | None = None
    gate: GateRecord = dataclasses.field(default_factory=GateRecord)  # this rank's comparisons
    worst: dict | None = None  # the largest errors over every rank
    windows: int = 0


def prepare_rank_variant(loaded: LoadedModel, name: str, wrapper: str) -> RankTrial:
    """The action's variant, or its outcome when it does not apply (the same on every rank)."""
    if WRAPPER.get(name) != wrapper:
        return RankTrial(name, outcome=Outcome("not-applied", f"the run's ranks were wrapped by {wrapper}; "
                                                          f"{name} changes {WRAPPER.get(name, '?')}"))
    try:
        return RankTrial(name, variant=get_action(name).prepare(loaded, "train"))
    except NotApplicable as e:
        return RankTrial(name, outcome=Outcome("not-applied", str(e)))
    except NotMeasurable as e:
        return RankTrial(name, outcome=Outcome("not-measurable", str(e)))


def local_leaves(captured: Captured) -> Captured:
    """Each rank compares what it holds: a DTensor gradient (FSDP2) as its local shard."""
    from torch.distributed.tensor import DTensor

    leaves = tuple((p, t.to_local() if isinstance(t, DTensor) else t) for p, t in captured.leaves)
    return dataclasses.replace(captured, leaves=leaves)


def gate(loaded: LoadedModel, baseline, trials: list[RankTrial], draws: int, seed: int, rank: int) -> None:
    """Every pending trial against the baseline on `draws` fresh draws; the ranks agree on each verdict."""
    pending = [t for t in trials if t.outcome is None]
    for d in range(draws):
        inputs = loaded.make_inputs(seed + 1 + d + rank * DRAW_RANK_STRIDE)
        base = local_leaves(capture_step(loaded, baseline, loaded.model, inputs, "train"))
        for t in pending:
            v = t.variant
            with v.context():
                got = local_leaves(capture_step(loaded, v.model, v.params_of, v.convert_inputs(inputs), "train"))
            t.gate.comparisons.extend(compare_captures(got, base, None, v.tolerance or default_tolerance))
            t.gate.draws += 1
    for t in pending:
        problems: list = [None] * dist.get_world_size()
        dist.all_gather_object(problems, (t.gate.problem, t.gate.worst()))
        failed = [(r, p) for r, (p, _) in enumerate(problems) if p]
        worst = _worst_over_ranks([w for _, w in problems])
        t.worst = worst
        if failed:
            r, p = failed[0]
            t.outcome = Outcome("failed-gate", f"rank {r}: {p}", t.variant.applied, gate=worst)


def _worst_over_ranks(worsts: list[dict | None]) -> dict | None:
    known = [w for w in worsts if w]
    if not known:
        return None
    out = dict(known[0])
    for key in ("rel_err", "ref_rel_err", "baseline_ref_rel_err"):
        values = [w[key] for w in known if w.get(key) is not None]
        out[key] = max(values) if values else None
    return {**out, "ranks": len(known)}


def time_trials(loaded: LoadedModel, baseline, trials: list[RankTrial], s: MeasureSettings,
                deadline: float) -> tuple[dict | None, int, int]:
    """Time the gated trials beside the baseline; (baseline step, steps per window, rounds)."""
    timed = [t for t in trials if t.outcome is None]
    if not timed:
        return None, 0, 0
    base = timed_loop("baseline", dataclasses.replace(loaded, model=baseline), "train")
    steps = agreed_steps(base, loaded.device)
    loops = [timed_loop(t.action, dataclasses.replace(loaded, model=t.variant.model), "train", t.variant.context)
             for t in timed]
    times = lockstep_windows_s([base, *loops], s.windows, steps, s.warmup, loaded.device, deadline)
    for t in timed:
        mine = times[t.action]
        t.windows = len(mine)
        speed = speedup_ci(times["baseline"], mine)
        gain = 1.0 - median_ci(mine).value / median_ci(times["baseline"]).value
        t.outcome = Outcome("passed", "", t.variant.applied, speedup=speed, gain_frac=gain, verdict=verdict(speed),
                            step_s=median_ci(mine), gate=t.worst)
    return median_ci(times["baseline"]).to_json(), steps, len(times["baseline"])


def trial_json(t: RankTrial) -> dict:
    o = t.outcome or Outcome("not-measurable", "not decided")
    return {"action": t.action, **o.to_json(), "windows": t.windows}


def measure_rank(s: MeasureSettings, env: RankEnv) -> None:
    start = time.monotonic()
    dev = rank_device(s.device, env.local_rank)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    dist.init_process_group(backend=backend)
    loaded = load_model(s.model, entry=s.entry, device=s.device, dtype=s.dtype, seed=s.seed)
    loaded = dataclasses.replace(loaded, device=dev)
    trials = [prepare_rank_variant(loaded, name, s.wrapper) for name in s.actions]  # before wrapping: FSDP shards in place
    baseline, wrapper = wrap_model(loaded, "train", s.fsdp)
    gate(loaded, baseline, trials, s.draws, s.seed, env.rank)
    # NB: the budget bounds the timing rounds, from their start: loading and gating run to completion
    # on every rank (a rank cannot leave a collective half-way).
    deadline = time.monotonic() + s.budget_s if s.budget_s is not None else float("inf")
    base_step, steps, rounds = time_trials(loaded, baseline, trials, s, deadline)
    if env.rank == 0:
        record = DistributedExperimentsRecord(
            complete=all(t.outcome is not None for t in trials), world_size=env.world_size, backend=backend,
            wrapper=wrapper,
            regime=regime_label(dev, steps) + "; per window the slowest rank's" if rounds else "nothing was timed",
            steps_per_window=steps, windows=rounds, baseline_step_s=base_step,
            elapsed_s=time.monotonic() - start, trials=tuple(trial_json(t) for t in trials))
        write_json_atomic(Path(s.out), record.to_json())
    for t in trials:
        if t.variant is not None:
            t.variant.close()


def measure_rank_main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return run_rank(MeasureSettings.read(Path(argv[0])), measure_rank)


# ------------------------------------------------------------
# Timing windows on every rank at once, so the ranks' collectives stay paired.
#
# Every rank runs the same windows in the same order (the experiment engine's back-to-back
# windows, variants rotating per round). What could make ranks diverge is agreed through a
# collective: the window length (the longest any rank needs) and whether another round runs
# (rank 0's clock decides, after each round, outside the timed spans). A window's time is the
# job's: the slowest rank's, because a synchronous job moves at that rank's pace.

def _comm_device(device: torch.device) -> torch.device:
    return device if device.type == "cuda" else torch.device("cpu")


def agreed_steps(step: TimedStep, device: torch.device) -> int:
    """Steps per window: autorange on each rank, the largest wins."""
    with step.activate():
        mine = autorange_steps(step.step, device)
    return int(max_over_ranks(mine, device))


def rank0_says(flag: bool, device: torch.device) -> bool:
    """Rank 0's `flag`, on every rank."""
    t = torch.tensor([1 if flag else 0], dtype=torch.int64, device=_comm_device(device))
    dist.broadcast(t, src=0)
    return bool(t.item())


def lockstep_windows_s(variants: Sequence[TimedStep], windows: int, steps: int, warmup: int,
                       device: torch.device, deadline: float = math.inf) -> dict[str, list[float]]:
    """Per variant, the job's step time per window: `windows` rounds, or fewer once rank 0's
    time.monotonic() passed `deadline` (at least one round runs)."""
    mine = interleaved_windows_s(variants, windows, steps, warmup, device, deadline_s=deadline,
                                 past_deadline=lambda d: not rank0_says(time.monotonic() <= d, device))
    return {name: slowest_rank(times, device) for name, times in mine.items()}


def slowest_rank(times_s: list[float], device: torch.device) -> list[float]:
    """Per window, the largest time over the ranks (every rank timed the same windows)."""
    t = torch.tensor(times_s, dtype=torch.float64, device=_comm_device(device))
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(x) for x in t.tolist()]


if __name__ == "__main__":
    sys.exit(measure_rank_main())

