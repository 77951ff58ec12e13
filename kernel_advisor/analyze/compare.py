"""Two runs → what changed: step time, per-op device time, hotspots that came or went,
settings, and what applying run A's recommendations actually bought.

Pure: takes loaded runs (and A's recommendations), returns a frozen RunComparison.
Times are per profiled step, so runs with different `--steps` compare fairly. The step
times are each run's one step time (collect/step_time.py) with its interval; when the two
intervals overlap the verdict is "no measurable difference", whatever the ratio.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Sequence

import pandas as pd

from kernel_advisor.collect.rundir import LoadedRun
from kernel_advisor.collect.step_time import StepTime, intervals_overlap, step_time_of
from kernel_advisor.records.recommendations import RecommendationEntry as Recommendation
from kernel_advisor.records.run import RunMeta

HOTSPOT_SHARE_PCT = 1.0  # "a hotspot": at least this share of the run's device time
KEY_COLUMNS = ("name", "input_shapes", "input_dtypes")
# run.json sections whose differences explain a speedup (or void the comparison).
CONTEXT_SECTIONS = ("device", "settings", "versions", "args")
_IGNORED_CONTEXT = {("args", "steps"), ("args", "warmup"), ("device", "driver")}


@dataclass(frozen=True)
class ContextChange:
    section: str  # "settings", "versions", "device", "args"
    key: str
    a: Any
    b: Any


@dataclass(frozen=True)
class RecommendationOutcome:
    """Run A's recommendation, and how the time it was about changed in run B.

    scope "ops": before/after are A's and B's device time per step of the ops the
    recommendation named (matched by name + shapes + dtypes; an op gone from B counts 0).
    scope "run": it named no op, so before/after are the runs' step times.
    """

    rule_id: str
    title: str
    scope: str
    ops_matched: int
    estimated_gain_s: float | None
    before_s: float
    after_s: float

    @property
    def observed_gain_s(self) -> float:
        return self.before_s - self.after_s


@dataclass(frozen=True)
class ModelFileChange:
    """The two runs profiled different model files (by content; the path alone may move)."""

    file_a: str | None
    file_b: str | None
    sha256_a: str
    sha256_b: str


@dataclass(frozen=True)
class RunComparison:
    run_a: str
    run_b: str
    step_a_s: float  # the run's step time (collect/step_time.py; NaN when the run has none)
    step_b_s: float
    device_per_step_a_s: float
    device_per_step_b_s: float
    ops: pd.DataFrame  # one row per op key in either run, largest |delta| first
    new_hotspots: pd.DataFrame  # in B above HOTSPOT_SHARE_PCT, absent from A
    vanished_hotspots: pd.DataFrame  # in A above HOTSPOT_SHARE_PCT, absent from B
    context_changes: tuple[ContextChange, ...]
    recommendations: tuple[RecommendationOutcome, ...] | None  # None: A has no recommendations.json
    step_a: StepTime | None = None  # with interval and basis; None: no step times
    step_b: StepTime | None = None
    model_change: ModelFileChange | None = None

    @property
    def step_verdict(self) -> str:
        """"faster", "slower" (B against A), "no measurable difference" (the intervals overlap),
        "no interval" (a run has none: only the ratio is known) or "no step times"."""
        return step_verdict(self.step_a, self.step_b)

    @property
    def step_ratio(self) -> float:
        """B / A: below 1 means B is faster."""
        return _ratio(self.step_b_s, self.step_a_s)

    @property
    def speedup(self) -> float:
        """A / B: above 1 means B is faster."""
        return _ratio(self.step_a_s, self.step_b_s)


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 and not math.isnan(num) else math.nan


def step_verdict(a: StepTime | None, b: StepTime | None) -> str:
    if a is None or b is None or not (a.value_s > 0 and b.value_s > 0):
        return "no step times"
    overlap = intervals_overlap(a, b)
    if overlap is None:
        return "no interval"
    if overlap:
        return "no measurable difference"
    return "faster" if b.value_s < a.value_s else "slower"


def model_file_change(meta_a: dict, meta_b: dict) -> ModelFileChange | None:
    """Set when both runs recorded their model file's sha256 and the two differ (imports record none)."""
    model_a, model_b = meta_a.get("model") or {}, meta_b.get("model") or {}
    sha_a, sha_b = model_a.get("sha256"), model_b.get("sha256")
    if not sha_a or not sha_b or sha_a == sha_b:
        return None
    return ModelFileChange(model_a.get("file"), model_b.get("file"), str(sha_a), str(sha_b))


def _step_value_s(step: StepTime | None) -> float:
    return step.value_s if step is not None else math.nan


def op_key(name: str, shapes: Any, dtypes: Any) -> str:
    """One string per (name, shapes, dtypes), independent of JSON spacing in the CSV."""
    return json.dumps([name, shapes, dtypes], separators=(",", ":"))


def per_step_ops(run: LoadedRun) -> pd.DataFrame:
    """Device time and calls per step per op key (rows sharing a key, e.g. in two regions, summed)."""
    ops = run.ops
    steps = RunMeta.of(run.meta).step_count
    if ops.empty:
        return pd.DataFrame(columns=["name", "input_shapes", "input_dtypes", "region", "time_per_step_s",
                                     "calls_per_step", "share_pct"], index=pd.Index([], name="key"))
    frame = pd.DataFrame({
        "key": [op_key(*k) for k in zip(*(ops[c] for c in KEY_COLUMNS))],
        "name": ops["name"], "input_shapes": ops["input_shapes"], "input_dtypes": ops["input_dtypes"],
        "region": ops["region"] if "region" in ops else "",
        "time_per_step_s": ops["device_time_total_s"] / steps, "calls_per_step": ops["calls"] / steps,
        "share_pct": ops["share_pct"],
    })
    return frame.groupby("key", sort=False).agg(
        name=("name", "first"), input_shapes=("input_shapes", "first"),
        input_dtypes=("input_dtypes", "first"),
        region=("region", lambda r: ", ".join(sorted({x for x in r if x}))),
        time_per_step_s=("time_per_step_s", "sum"), calls_per_step=("calls_per_step", "sum"),
        share_pct=("share_pct", "sum"))


def op_deltas(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Outer join of two per_step_ops tables; an op missing from a run has 0 time there."""
    joined = pd.merge(a, b, how="outer", left_index=True, right_index=True, suffixes=("_a", "_b"))
    out = pd.DataFrame(index=joined.index)
    for col in ("name", "input_shapes", "input_dtypes"):
        out[col] = joined[f"{col}_a"].where(joined[f"{col}_a"].notna(), joined[f"{col}_b"])
    out["region"] = joined["region_a"].where(joined["region_a"].notna(), joined["region_b"])
    time_a, time_b = joined["time_per_step_s_a"], joined["time_per_step_s_b"]
    out["in_a"], out["in_b"] = time_a.notna(), time_b.notna()
    out["calls_per_step_a"] = joined["calls_per_step_a"].fillna(0.0)
    out["calls_per_step_b"] = joined["calls_per_step_b"].fillna(0.0)
    out["time_per_step_a_s"], out["time_per_step_b_s"] = time_a.fillna(0.0), time_b.fillna(0.0)
    out["delta_per_step_s"] = out["time_per_step_b_s"] - out["time_per_step_a_s"]
    both = out["in_a"] & out["in_b"] & (out["time_per_step_a_s"] > 0)
    out["ratio"] = (out["time_per_step_b_s"] / out["time_per_step_a_s"]).where(both)
    out["share_a_pct"], out["share_b_pct"] = joined["share_pct_a"], joined["share_pct_b"]
    order = out["delta_per_step_s"].abs().sort_values(ascending=False, kind="stable").index
    return out.loc[order]


def hotspots_only_in(deltas: pd.DataFrame, side: str, min_share_pct: float) -> pd.DataFrame:
    """Rows above min_share_pct in run `side` ("a" or "b") and absent from the other run."""
    other = "b" if side == "a" else "a"
    mask = deltas[f"in_{side}"] & ~deltas[f"in_{other}"] & (deltas[f"share_{side}_pct"] >= min_share_pct)
    return deltas[mask].sort_values(f"time_per_step_{side}_s", ascending=False, kind="stable")


def context_changes(meta_a: dict, meta_b: dict) -> tuple[ContextChange, ...]:
    changes = []
    for section in CONTEXT_SECTIONS:
        sec_a, sec_b = meta_a.get(section) or {}, meta_b.get(section) or {}
        for key in sorted(set(sec_a) | set(sec_b)):
            if (section, key) not in _IGNORED_CONTEXT and sec_a.get(key) != sec_b.get(key):
                changes.append(ContextChange(section, key, sec_a.get(key), sec_b.get(key)))
    return tuple(changes)


def recommendation_outcomes(recs: Sequence[Recommendation], run_a: LoadedRun, deltas: pd.DataFrame,
                            step_a_s: float, step_b_s: float) -> tuple[RecommendationOutcome, ...]:
    keys_by_row = {}
    if not run_a.ops.empty:
        keys_by_row = {int(r): op_key(n, s, d) for r, n, s, d in zip(
            run_a.ops["row_id"], *(run_a.ops[c] for c in KEY_COLUMNS))}
    outcomes = []
    for rec in recs:
        if rec.row_ids:
            keys = sorted({keys_by_row[r] for r in rec.row_ids if r in keys_by_row})
            rows = deltas.loc[keys]
            # NB: only the named ops are summed; time a fix moved into a new op (a fused
            # kernel replacing them) shows up under new hotspots, not here.
            before, after = (float(rows["time_per_step_a_s"].sum()), float(rows["time_per_step_b_s"].sum())) if keys \
                else (math.nan, math.nan)
            outcomes.append(RecommendationOutcome(rec.rule_id, rec.title, "ops", len(keys),
                                                  rec.estimated_gain_per_step_s, before, after))
        else:
            outcomes.append(RecommendationOutcome(rec.rule_id, rec.title, "run", 0,
                                                  rec.estimated_gain_per_step_s, step_a_s, step_b_s))
    return tuple(outcomes)


def compare_runs(run_a: LoadedRun, run_b: LoadedRun, recommendations_a: Sequence[Recommendation] | None = None,
                 min_share_pct: float = HOTSPOT_SHARE_PCT) -> RunComparison:
    """Everything `advisor compare` reports; B is the "after" run."""
    table_a, table_b = per_step_ops(run_a), per_step_ops(run_b)
    deltas = op_deltas(table_a, table_b)
    step_a, step_b = step_time_of(run_a.meta), step_time_of(run_b.meta)
    step_a_s, step_b_s = _step_value_s(step_a), _step_value_s(step_b)
    outcomes = None if recommendations_a is None else recommendation_outcomes(
        recommendations_a, run_a, deltas, step_a_s, step_b_s)
    return RunComparison(
        run_a=str(run_a.path), run_b=str(run_b.path), step_a_s=step_a_s, step_b_s=step_b_s,
        device_per_step_a_s=float(table_a["time_per_step_s"].sum()),
        device_per_step_b_s=float(table_b["time_per_step_s"].sum()),
        ops=deltas, new_hotspots=hotspots_only_in(deltas, "b", min_share_pct),
        vanished_hotspots=hotspots_only_in(deltas, "a", min_share_pct),
        context_changes=context_changes(run_a.meta, run_b.meta), recommendations=outcomes,
        step_a=step_a, step_b=step_b, model_change=model_file_change(run_a.meta, run_b.meta))
