"""Merge per-rank results into the run's distributed summary. Pure: records in, records out.

Ranks of a data-parallel job meet at every collective, so the job runs at the pace of the
slowest rank. A rank that reaches a collective early waits inside it for its peers: its
kernel time includes that wait. The last rank to arrive measures the transfer alone, so
bandwidths use the shortest duration of each call across ranks, "time" columns keep what
each rank actually spent, and the difference is the time a rank waited for its peers.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import pandas as pd

from kernel_advisor.analyze.ceilings import busbw_factor
from kernel_advisor.distributed.comms import Overlap

# NB: identical ranks differ by a few % in median step time from noise alone.
STRAGGLER_MIN_RATIO = 1.05
# NB: peers waiting >= 5 % of the step inside collectives for one rank make it a straggler,
# even when synchronisation keeps every rank's step time equal.
WAIT_MIN_PCT = 5.0
RANK_COLUMNS = ("rank", "step_median_s", "device_busy_per_step_s", "comm_per_step_s",
                "exposed_comm_per_step_s", "comm_wait_per_step_s", "overlap_frac", "comm_calls",
                "is_straggler")
COLLECTIVE_COLUMNS = ("collective", "calls", "calls_per_step", "bytes_per_call", "bytes_per_step",
                      "time_per_step_s", "transfer_per_step_s", "algbw_bytes_per_s", "busbw_bytes_per_s",
                      "busbw_frac_of_ceiling")


@dataclass(frozen=True)
class RankResult:
    rank: int
    steps: int
    step_wall_s: tuple[float, ...]
    device_busy_s: float  # over all profiled steps
    calls: pd.DataFrame = field(hash=False, compare=False)  # comms.COMM_COLUMNS
    overlap: Overlap = field(default=Overlap(0.0, 0.0, 0.0, 0.0, math.nan))
    # per collective ("all_gather", ...): how much of that collective's time compute hid
    overlap_by_collective: dict = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True)
class Merged:
    world_size: int
    ranks: pd.DataFrame = field(hash=False, compare=False)  # RANK_COLUMNS
    collectives: pd.DataFrame = field(hash=False, compare=False)  # COLLECTIVE_COLUMNS
    slowest_rank: int
    fastest_rank: int
    straggler_ratio: float
    calls_aligned: bool  # every rank made the same calls, so per-call minima were taken
    evidence: dict = field(hash=False, compare=False)  # run.json "distributed"


def straggler_ratio(step_medians_s: Sequence[float]) -> float:
    """Slowest median step / fastest median step: 1.0 = balanced, 1.25 = one rank 25 % slower."""
    fastest = min(step_medians_s)
    return max(step_medians_s) / fastest if fastest > 0 else math.nan


def _per_step(total: float, steps: int) -> float:
    return total / max(steps, 1)


def numbered_calls(results: Sequence[RankResult]) -> tuple[pd.DataFrame, bool]:
    """Every rank's calls with `rank` and `call` (its index among that rank's calls of the
    collective), and whether every rank made the same calls.

    The k-th call of a collective on one rank is the k-th on every rank: collectives are
    issued in the same order everywhere. A profiling window that cut a call breaks that.
    """
    frames = [r.calls.sort_values("ts_us", kind="stable").assign(rank=r.rank) for r in results]
    calls = pd.concat(frames, ignore_index=True)
    if not len(calls):
        return calls.assign(call=pd.Series(dtype="int64")), True
    calls["call"] = calls.groupby(["rank", "collective"]).cumcount()
    counts = calls.groupby(["rank", "collective"]).size().unstack(fill_value=0)
    aligned = len(counts) == len(results) and bool((counts.nunique(axis=0) == 1).all())
    return calls, aligned


def comm_wait_s(calls: pd.DataFrame, aligned: bool) -> dict[int, float]:
    """Per rank, time spent inside collectives waiting for peers: Σ over calls (own − shortest duration).

    NB: assumes the transfer itself lasts as long on every rank, so the last rank to arrive
    waits ~0 and the others wait for it. Empty when the ranks' calls do not line up.
    """
    if not aligned or not len(calls):
        return {}
    shortest = calls.groupby(["collective", "call"])["dur_us"].transform("min")
    return ((calls["dur_us"] - shortest) * 1e-6).groupby(calls["rank"]).sum().to_dict()


def rank_frame(results: Sequence[RankResult], wait_s: dict[int, float]) -> pd.DataFrame:
    rows = [{
        "rank": r.rank, "step_median_s": statistics.median(r.step_wall_s),
        "device_busy_per_step_s": _per_step(r.device_busy_s, r.steps),
        "comm_per_step_s": _per_step(r.overlap.comm_s, r.steps),
        "exposed_comm_per_step_s": _per_step(r.overlap.exposed_s, r.steps),
        "comm_wait_per_step_s": _per_step(wait_s[r.rank], r.steps) if r.rank in wait_s else math.nan,
        "overlap_frac": r.overlap.overlap_frac, "comm_calls": len(r.calls), "is_straggler": False,
    } for r in results]
    table = pd.DataFrame(rows, columns=list(RANK_COLUMNS))
    table["is_straggler"] = straggler_flags(table)
    return table


def straggler_flags(ranks: pd.DataFrame) -> pd.Series:
    """The rank the job waits for: the slowest step (ratio >= STRAGGLER_MIN_RATIO), or the
    rank its peers wait for inside collectives (longest peer wait >= WAIT_MIN_PCT of the step)."""
    medians = ranks["step_median_s"]
    flags = (medians.index == medians.idxmax()) & (straggler_ratio(medians.tolist()) >= STRAGGLER_MIN_RATIO)
    wait = ranks["comm_wait_per_step_s"]
    if wait.notna().any() and 100.0 * wait.max() / medians.max() >= WAIT_MIN_PCT:
        flags |= ranks.index == wait.idxmin()  # it arrives last: everyone else waits for it
    return pd.Series(flags, index=ranks.index)


def aligned_calls(calls: pd.DataFrame, aligned: bool) -> pd.DataFrame:
    """One row per collective call of the job: (collective, call, bytes, group_size, shortest_s, mean_s).

    Aligned ranks: the k-th calls of all ranks are one call, timed by the shortest (the
    transfer alone) and the mean (what the ranks spent). Otherwise each rank's call stands alone.
    """
    columns = ["collective", "call", "bytes", "group_size", "shortest_s", "mean_s"]
    if not len(calls):
        return pd.DataFrame(columns=columns)
    keys = ["collective", "call"] if aligned else ["rank", "collective", "call"]
    out = calls.groupby(keys, sort=False).agg(
        bytes=("bytes", "max"), group_size=("group_size", "max"),
        shortest_s=("dur_us", "min"), mean_s=("dur_us", "mean")).reset_index()
    out["shortest_s"] *= 1e-6
    out["mean_s"] *= 1e-6
    return out[columns]


def bandwidths(calls: pd.DataFrame) -> tuple[float, float]:
    """(algbw, busbw) over calls with known sizes: Σ bytes / Σ time, Σ bytes·factor / Σ time.

    NB: time-weighted, so a few large calls dominate; that is the rate the bytes moved at.
    """
    known = calls[calls["bytes"].notna() & (calls["shortest_s"] > 0)]
    time_s = float(known["shortest_s"].sum())
    if not time_s > 0:
        return math.nan, math.nan
    factors = [busbw_factor(c, g) for c, g in zip(known["collective"], known["group_size"])]
    bus_bytes = float((known["bytes"].to_numpy(float) * np.array(factors)).sum())
    return float(known["bytes"].sum()) / time_s, bus_bytes / time_s


def collective_frame(calls: pd.DataFrame, steps: int, ceiling_bytes_per_s: float | None,
                     per_rank_copies: int = 1) -> pd.DataFrame:
    """Per collective: calls, sizes, time per step and bandwidth against the ceiling."""
    rows = []
    for name, group in calls.groupby("collective", sort=False):
        algbw, busbw = bandwidths(group)
        n_calls = len(group) // per_rank_copies
        rows.append({
            "collective": name, "calls": n_calls, "calls_per_step": _per_step(n_calls, steps),
            "bytes_per_call": float(group["bytes"].mean()),
            "bytes_per_step": _per_step(float(group["bytes"].sum()) / per_rank_copies, steps),
            "time_per_step_s": _per_step(float(group["mean_s"].sum()) / per_rank_copies, steps),
            "transfer_per_step_s": _per_step(float(group["shortest_s"].sum()) / per_rank_copies, steps),
            "algbw_bytes_per_s": algbw, "busbw_bytes_per_s": busbw,
            "busbw_frac_of_ceiling": busbw / ceiling_bytes_per_s if ceiling_bytes_per_s else math.nan,
        })
    table = pd.DataFrame(rows, columns=list(COLLECTIVE_COLUMNS))
    return table.sort_values("time_per_step_s", ascending=False, kind="stable").reset_index(drop=True)


def _none_if_nan(value):
    if isinstance(value, (float, np.floating)) and math.isnan(value):
        return None
    return value.item() if hasattr(value, "item") else value


def collective_overlap_frac(results: Sequence[RankResult], collective: str) -> float:
    """Σ overlapped / Σ busy of one collective over the ranks (NaN when no rank ran it).

    For FSDP's all-gathers this is prefetch overlap: the share of all-gather time hidden under compute.
    """
    parts = [r.overlap_by_collective[collective] for r in results if collective in r.overlap_by_collective]
    busy = sum(p.comm_busy_s for p in parts)
    return sum(p.overlapped_s for p in parts) / busy if busy > 0 else math.nan


def distributed_evidence(results: Sequence[RankResult], ranks: pd.DataFrame, calls: pd.DataFrame,
                         collectives: pd.DataFrame, ceiling_bytes_per_s: float | None) -> dict:
    """The run-level numbers rules read (run.json "distributed"); times are per step, mean over ranks."""
    step_s = float(ranks["step_median_s"].max())  # the job runs at its slowest rank's pace
    exposed_s = float(ranks["exposed_comm_per_step_s"].mean())
    busy_s = sum(r.overlap.comm_busy_s for r in results)
    overlapped_s = sum(r.overlap.overlapped_s for r in results)
    wait = ranks["comm_wait_per_step_s"]
    allreduce = collectives[collectives["collective"] == "all_reduce"]
    basis = calls[calls["collective"] == "all_reduce"] if len(allreduce) else calls
    _, busbw = bandwidths(basis) if len(basis) else (math.nan, math.nan)
    evidence = {
        "world_size": len(results), "steps": results[0].steps, "step_s": step_s,
        "straggler_ratio": straggler_ratio(ranks["step_median_s"].tolist()),
        "slowest_rank": int(ranks.loc[ranks["step_median_s"].idxmax(), "rank"]),
        "fastest_rank": int(ranks.loc[ranks["step_median_s"].idxmin(), "rank"]),
        "straggler_ranks": [int(r) for r in ranks.loc[ranks["is_straggler"], "rank"]],
        "comm_time_s": float(ranks["comm_per_step_s"].mean()), "exposed_comm_s": exposed_s,
        "exposed_comm_pct": 100.0 * exposed_s / step_s if step_s > 0 else math.nan,
        "max_comm_wait_s": float(wait.max()) if wait.notna().any() else math.nan,
        "max_comm_wait_pct": 100.0 * float(wait.max()) / step_s if wait.notna().any() and step_s > 0 else math.nan,
        "waited_for_rank": int(ranks.loc[wait.idxmin(), "rank"]) if wait.notna().any() else None,
        "overlap_frac": overlapped_s / busy_s if busy_s > 0 else math.nan,
        "allgather_overlap_frac": collective_overlap_frac(results, "all_gather"),
        "reduce_scatter_overlap_frac": collective_overlap_frac(results, "reduce_scatter"),
        "allreduce_count": float(allreduce["calls_per_step"].sum()) if len(allreduce) else 0.0,
        "mean_allreduce_bytes": float(allreduce["bytes_per_call"].iloc[0]) if len(allreduce) else math.nan,
        "busbw_bytes_per_s": busbw, "bus_ceiling_bytes_per_s": ceiling_bytes_per_s,
        "busbw_frac_of_ceiling": busbw / ceiling_bytes_per_s if ceiling_bytes_per_s else math.nan,
    }
    return {k: _none_if_nan(v) for k, v in evidence.items()}


def merge_ranks(results: Sequence[RankResult], ceiling_bytes_per_s: float | None = None) -> Merged:
    """Per-rank table, collective table, straggler and the run-level evidence."""
    results = sorted(results, key=lambda r: r.rank)
    numbered, aligned = numbered_calls(results)
    ranks = rank_frame(results, comm_wait_s(numbered, aligned))
    calls = aligned_calls(numbered, aligned)
    copies = 1 if aligned else len(results)
    collectives = collective_frame(calls, results[0].steps, ceiling_bytes_per_s, copies)
    evidence = distributed_evidence(results, ranks, calls, collectives, ceiling_bytes_per_s)
    evidence["calls_aligned"] = aligned
    return Merged(world_size=len(results), ranks=ranks, collectives=collectives,
                  slowest_rank=evidence["slowest_rank"], fastest_rank=evidence["fastest_rank"],
                  straggler_ratio=evidence["straggler_ratio"], calls_aligned=aligned, evidence=evidence)


# ------------------------------------------------------------
# Collective skew: the same call seen on every rank, the spread of its start and end times.
#
# The k-th call of a collective on one rank is the k-th on every rank (merge.numbered_calls).
# Its start spread (last rank in − first rank in) is how long the earliest rank waited for
# the latest: arrival skew, the straggler's footprint. Its end spread is near zero when the
# ranks' trace clocks agree, since a collective completes together everywhere; a steady end
# spread is the offset between the clocks (traces from different hosts). Pure functions.

SKEW_COLUMNS = ("collective", "calls", "start_spread_median_us", "start_spread_max_us",
                "end_spread_median_us", "end_spread_max_us")
LATE_COLUMNS = ("rank", "last_to_arrive_calls", "last_to_arrive_frac", "mean_lateness_us")


def call_spreads(numbered: pd.DataFrame) -> pd.DataFrame:
    """Per (collective, call): start and end spread across ranks (µs), and the last rank in."""
    if not len(numbered):
        return pd.DataFrame(columns=["collective", "call", "start_spread_us", "end_spread_us", "last_rank"])
    calls = numbered.assign(end_us=numbered["ts_us"] + numbered["dur_us"])
    grouped = calls.groupby(["collective", "call"], sort=False)
    out = grouped.agg(first_in=("ts_us", "min"), last_in=("ts_us", "max"),
                      first_out=("end_us", "min"), last_out=("end_us", "max")).reset_index()
    out["start_spread_us"] = out["last_in"] - out["first_in"]
    out["end_spread_us"] = out["last_out"] - out["first_out"]
    out["last_rank"] = calls.loc[grouped["ts_us"].idxmax().to_numpy(), "rank"].to_numpy()
    return out[["collective", "call", "start_spread_us", "end_spread_us", "last_rank"]]


def skew_frame(spreads: pd.DataFrame) -> pd.DataFrame:
    """Per collective: calls and the median / largest start and end spread, µs."""
    rows = [{"collective": name, "calls": len(g),
             "start_spread_median_us": float(g["start_spread_us"].median()),
             "start_spread_max_us": float(g["start_spread_us"].max()),
             "end_spread_median_us": float(g["end_spread_us"].median()),
             "end_spread_max_us": float(g["end_spread_us"].max())}
            for name, g in spreads.groupby("collective", sort=False)]
    return pd.DataFrame(rows, columns=list(SKEW_COLUMNS))


def lateness_table(numbered: pd.DataFrame, spreads: pd.DataFrame, ranks: list[int]) -> pd.DataFrame:
    """Per rank: how often it was the last to reach a call, and how late it was on average
    (its start − the first rank's start, µs): the rank the others wait for leads both."""
    total = max(len(spreads), 1)
    last = spreads["last_rank"].value_counts() if len(spreads) else pd.Series(dtype=int)
    if len(numbered):
        first = numbered.groupby(["collective", "call"])["ts_us"].transform("min")
        late = (numbered["ts_us"] - first).groupby(numbered["rank"]).mean()
    else:
        late = pd.Series(dtype=float)
    rows = [{"rank": r, "last_to_arrive_calls": int(last.get(r, 0)),
             "last_to_arrive_frac": float(last.get(r, 0)) / total,
             "mean_lateness_us": float(late.get(r, float("nan")))} for r in ranks]
    return pd.DataFrame(rows, columns=list(LATE_COLUMNS))
