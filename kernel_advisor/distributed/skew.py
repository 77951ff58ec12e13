"""Collective skew: the same call seen on every rank, the spread of its start and end times.

The k-th call of a collective on one rank is the k-th on every rank (merge.numbered_calls).
Its start spread (last rank in − first rank in) is how long the earliest rank waited for
the latest: arrival skew, the straggler's footprint. Its end spread is near zero when the
ranks' trace clocks agree, since a collective completes together everywhere; a steady end
spread is the offset between the clocks (traces from different hosts). Pure functions.
"""
from __future__ import annotations

import pandas as pd

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
