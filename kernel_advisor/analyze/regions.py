"""Restrict a run to one NVTX / record_function region, or summarise time per region."""
from __future__ import annotations

import dataclasses
import fnmatch

import numpy as np
import pandas as pd

from kernel_advisor.collect.rundir import LoadedRun
from kernel_advisor.errors import UserInputError
from kernel_advisor.records.run import RunMeta


def region_view(run: LoadedRun, pattern: str) -> LoadedRun:
    """The run as seen inside the regions matching `pattern` (a name or an fnmatch glob).

    Rows are re-aggregated from the region's own occurrences in sequence.csv: calls and
    device time count only what ran inside. Shares stay relative to the whole run, so gains
    estimated on the view are still a fraction of the real step (Amdahl).
    """
    seq = run.sequence
    inside = seq[_matching(seq["region"], pattern)]
    if inside.empty:
        known = ", ".join(sorted({r for r in seq["region"] if r})) or "none recorded"
        raise UserInputError(f"no op ran in a region matching '{pattern}'",
                             f"use one of the run's regions: {known}")
    per_row = inside.groupby("row_id").agg(calls=("seq", "size"), time_s=("device_time_per_call_s", "sum"))
    ops = run.ops[run.ops["row_id"].isin(per_row.index)].copy()
    scale = ops["row_id"].map(per_row["time_s"]) / ops["device_time_total_s"].replace(0, np.nan)
    ops["calls"] = ops["row_id"].map(per_row["calls"]).astype(int)
    ops["device_time_total_s"] = ops["row_id"].map(per_row["time_s"])
    meta = RunMeta.of(run.meta)
    steps, total = meta.step_count, meta.total_device_time_s
    ops["device_time_per_step_s"] = ops["device_time_total_s"] / steps
    ops["device_time_per_call_s"] = ops["device_time_total_s"] / ops["calls"]
    ops["share_pct"] = 100.0 * ops["device_time_total_s"] / total if total > 0 else 0.0
    ops["cpu_time_total_s"] = ops["cpu_time_total_s"] * scale.fillna(0.0)
    ops["kernel_count"] = np.rint(ops["kernel_count"] * scale.fillna(0.0)).astype(int)
    if "roofline_per_call_s" in ops.columns:
        needed_s = ops["calls"] * ops["roofline_per_call_s"]
        ops["headroom_total_s"] = (ops["device_time_total_s"] - needed_s).clip(lower=0.0)
    ops["region"] = pattern
    ops = ops.sort_values("device_time_total_s", ascending=False, kind="stable").reset_index(drop=True)
    meta = dict(run.meta, region=pattern)
    return dataclasses.replace(run, ops=ops, sequence=inside.reset_index(drop=True), meta=meta)


def _matching(regions: pd.Series, pattern: str) -> list[bool]:
    """The regions named `pattern` exactly when there are any, else those it matches as a glob:
    `blocks[0]` is a legal region name, and as a glob it would match only `blocks0`."""
    exact = [r == pattern for r in regions]
    return exact if any(exact) else [fnmatch.fnmatchcase(r, pattern) for r in regions]


def region_summary(sequence: pd.DataFrame) -> pd.DataFrame:
    """Device time and op count per region, largest first ("" = outside any region)."""
    g = sequence.groupby("region").agg(device_time_total_s=("device_time_per_call_s", "sum"),
                                       ops=("seq", "size"))
    g = g.reset_index()
    order = g.sort_values(["device_time_total_s", "region"], ascending=[False, True], kind="stable")
    return order.reset_index(drop=True)
