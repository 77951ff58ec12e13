"""Fit the action-gain model (recommend/gain_fit.py) on every measured sweep in advice.csv, validate it
leave-one-model-out, and write the coefficients and the docs/accuracy.md table.

    python3 benchmarks/advice/fit_action_gain.py [--csv benchmarks/data/advice.csv] [--write]

Rows: every timed single action (kinds `action`, `also`, `rule`, status passed, one per model,
device and action) and every plan. Features come from the same CSV: the action's predicted
union (its `action` row, else rebuilt from the `rule` rows), the CUDA-graphs rule's claim (the
host-gap share) and the hotspot rows (memory-bound share below the roof). A plan is predicted
by combining its actions' predictions (gain_fit.combined_interval).

Per device type and action family with at least MIN_FULL rows, all three features; with at
least MIN_POINTS, the predicted union alone; the rest fall to `default` (every row, the
predicted union alone). Fitting is least absolute deviations with coefficients ≥ 0 (a
monotone model: the share within ±0.15 rewards the median, not the mean, and slowdowns of
−0.3 would drag a least-squares fit down for every model). The interval is the 10th–90th
percentile of the family's residuals. Leave-one-model-out holds out a model on every device.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from scipy.optimize import linprog

from kernel_advisor.recommend.gain_fit import action_family
from kernel_advisor.recommend.gain_fit import (
    DEFAULT_FAMILY, FEATURES, FIT_FILE, FamilyFit, GainInterval, combined_interval, memory_bound_frac,
    predicted_gain_interval)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(HERE), str(HERE.parent)]
from docdata import commit_source, splice_block  # noqa: E402
from fit_gain import union_predicted  # noqa: E402

DEFAULT_CSV = ROOT / "benchmarks" / "data" / "advice.csv"
DOC = ROOT / "docs" / "accuracy.md"
BEGIN, END = "<!-- gain-fit:begin -->", "<!-- gain-fit:end -->"
TOLERANCE = 0.15  # of the step
MIN_FULL, MIN_POINTS = 10, 3
RESIDUAL_PCTS = (10, 90)
TIMED_KINDS = ("rule", "also", "action")
HOST_BOUND_GAP_FRAC = 0.5  # a step idle this much is host-bound


def device_type(name: str) -> str:
    return "cpu" if str(name).lower() == "cpu" else "cuda"


def read_advice(path: Path) -> pd.DataFrame:
    df = pd.read_csv(path, dtype={"subject": str, "action": str, "rule_id": str, "reason": str})
    return df.fillna({"subject": "", "action": "", "rule_id": "", "reason": ""})


def hotspot_verdict(reason: str) -> str:
    """The verdict a hotspot row's reason starts with: "aten::relu (memory-bound): ..."."""
    m = re.match(r"^\S+ \(([^)]*)\)", reason)
    return m.group(1) if m else ""


def run_features(advice: pd.DataFrame) -> pd.DataFrame:
    """Per (device, model, dtype, mode): host_gap_frac and memory_bound_frac."""
    out = []
    for (dev, model, dtype, mode), g in advice.groupby(["device_name", "model", "dtype", "mode"]):
        gap = float(g[(g["kind"] == "rule") & (g["rule_id"] == "compile-cuda-graphs")]["predicted_gain_frac"].sum())
        spots = g[g["kind"] == "hotspot"]
        mem = memory_bound_frac(((100.0 * s, hotspot_verdict(r), t) for s, r, t in
                                 zip(spots["predicted_gain_frac"], spots["reason"], spots["action"])), gap)
        out.append({"device_name": dev, "model": model, "dtype": dtype, "mode": mode,
                    "host_gap_frac": min(gap, 1.0), "memory_bound_frac": mem})
    return pd.DataFrame(out)


def action_predicted(advice: pd.DataFrame, dev: str, model: str, action: str) -> float:
    """The advisor's own union for `action` on the model: its `action` row, else rebuilt from the rules."""
    mine = advice[(advice["device_name"] == dev) & (advice["model"] == model)]
    stated = mine[(mine["kind"] == "action") & (mine["action"] == action)]["predicted_gain_frac"].dropna()
    if len(stated):
        return float(stated.iloc[0])
    return float(union_predicted(mine[mine["kind"] == "rule"], action) or 0.0)


def action_rows(advice: pd.DataFrame) -> pd.DataFrame:
    """One row per measured single action: features, family, measured gain."""
    timed = advice[advice["kind"].isin(TIMED_KINDS) & (advice["status"] == "passed")
                   & ~advice["action"].str.contains(r"\+", regex=True)]
    feats = run_features(advice).set_index(["device_name", "model", "dtype", "mode"])
    out = []
    for (dev, model, dtype, mode, action), g in timed.groupby(["device_name", "model", "dtype", "mode", "action"]):
        measured = g["measured_gain_frac"].dropna()
        if measured.empty or action in ("", "none"):
            continue
        run = feats.loc[(dev, model, dtype, mode)]
        out.append({"device_type": device_type(dev), "device_name": dev, "model": model, "mode": mode,
                    "action": action, "family": action_family(action),
                    "predicted_frac": action_predicted(advice, dev, model, action),
                    "host_gap_frac": run["host_gap_frac"], "memory_bound_frac": run["memory_bound_frac"],
                    "measured": float(measured.iloc[0])})
    return pd.DataFrame(out)


def plan_rows(advice: pd.DataFrame) -> pd.DataFrame:
    """One row per measured plan: its actions and the features each needs."""
    plans = advice[(advice["kind"] == "plan") & (advice["status"] == "passed")].dropna(subset=["measured_gain_frac"])
    feats = run_features(advice).set_index(["device_name", "model", "dtype", "mode"])
    out = []
    for _, p in plans.iterrows():
        run = feats.loc[(p["device_name"], p["model"], p["dtype"], p["mode"])]
        parts = [a for a in p["action"].split("+") if a]
        out.append({"device_type": device_type(p["device_name"]), "device_name": p["device_name"],
                    "model": p["model"], "mode": p["mode"], "actions": parts,
                    "predicted_frac": [action_predicted(advice, p["device_name"], p["model"], a) for a in parts],
                    "host_gap_frac": run["host_gap_frac"], "memory_bound_frac": run["memory_bound_frac"],
                    "measured": float(p["measured_gain_frac"])})
    return pd.DataFrame(out)


# ---------------------------------------------------------------- the fit

def lad_nonnegative(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin_b Σ|y − x b| subject to b ≥ 0, as a linear programme."""
    n, k = x.shape
    cost = np.r_[np.zeros(k), np.ones(2 * n)]
    a_eq = np.hstack([x, np.eye(n), -np.eye(n)])
    res = linprog(cost, A_eq=a_eq, b_eq=y, bounds=[(0, None)] * (k + 2 * n), method="highs")
    return res.x[:k] if res.success else np.zeros(k)


def _coefficients(rows: pd.DataFrame, features: tuple[str, ...]) -> np.ndarray:
    return lad_nonnegative(rows[list(features)].to_numpy(float), rows["measured"].to_numpy(float))


def _predicted(rows: pd.DataFrame, features: tuple[str, ...], b: np.ndarray) -> np.ndarray:
    return np.clip(rows[list(features)].to_numpy(float) @ b, 0.0, 1.0)


def held_out_residuals(rows: pd.DataFrame, features: tuple[str, ...]) -> np.ndarray:
    """measured − predicted, each model's rows predicted by a fit on the family's other models
    (jackknife): in-sample residuals would give an interval too narrow for a model not yet seen."""
    out = []
    for model in rows["model"].unique():
        held = rows["model"] == model
        if held.all():
            b = _coefficients(rows, features)
        else:
            b = _coefficients(rows[~held], features)
        out.append(rows.loc[held, "measured"].to_numpy(float) - _predicted(rows[held], features, b))
    return np.concatenate(out)


def fit_family(rows: pd.DataFrame, features: tuple[str, ...]) -> FamilyFit:
    b = _coefficients(rows, features)
    low, high = np.percentile(held_out_residuals(rows, features), RESIDUAL_PCTS)
    return FamilyFit({f: float(c) for f, c in zip(features, b)}, float(low), float(high), len(rows))


def fit_all(rows: pd.DataFrame) -> dict[str, dict[str, FamilyFit]]:
    """{device type: {family: fit}}, `default` for every device type."""
    out: dict[str, dict[str, FamilyFit]] = {}
    for dev, d in rows.groupby("device_type"):
        fits = {DEFAULT_FAMILY: fit_family(d, ("predicted_frac",))}
        for family, g in d.groupby("family"):
            if len(g) >= MIN_FULL:
                fits[family] = fit_family(g, FEATURES)
            elif len(g) >= MIN_POINTS:
                fits[family] = fit_family(g, ("predicted_frac",))
        out[dev] = fits
    return out


def _fit_for(fits: dict, dev: str, action: str) -> FamilyFit | None:
    table = fits.get(dev, {})
    return table.get(action_family(action)) or table.get(DEFAULT_FAMILY)


def predict_action(fits: dict, row) -> GainInterval:
    fit = _fit_for(fits, row["device_type"], row["action"])
    if fit is None:
        v = float(row["predicted_frac"])
        return GainInterval(v, v, v)
    return predicted_gain_interval({f: row[f] for f in FEATURES}, fit)


def predict_plan(fits: dict, row) -> GainInterval:
    parts = []
    for action, predicted in zip(row["actions"], row["predicted_frac"]):
        parts.append(predict_action(fits, {"device_type": row["device_type"], "action": action,
                                           "predicted_frac": predicted, "host_gap_frac": row["host_gap_frac"],
                                           "memory_bound_frac": row["memory_bound_frac"]}))
    return combined_interval(parts)


def leave_one_model_out(rows: pd.DataFrame, plans: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each model's actions and plans predicted by a fit on the other models only."""
    acts, pls = [], []
    for model in sorted(set(rows["model"]) | set(plans["model"])):
        fits = fit_all(rows[rows["model"] != model])
        for _, r in rows[rows["model"] == model].iterrows():
            acts.append({**r.to_dict(), **_interval_cols(predict_action(fits, r))})
        for _, p in plans[plans["model"] == model].iterrows():
            pls.append({**p.to_dict(), **_interval_cols(predict_plan(fits, p))})
    return pd.DataFrame(acts), pd.DataFrame(pls)


def _interval_cols(iv: GainInterval) -> dict:
    return {"value": iv.value, "low": iv.low, "high": iv.high}


# ---------------------------------------------------------------- scores and the table

def within(df: pd.DataFrame, column: str = "value", tolerance: float = TOLERANCE) -> pd.Series:
    return (df[column] - df["measured"]).abs() <= tolerance


def covered(df: pd.DataFrame) -> pd.Series:
    return (df["low"] <= df["measured"]) & (df["measured"] <= df["high"])


def model_class(host_gap_frac: float, memory_bound_frac: float) -> str:
    """What sets the pace of the step: host launches, memory traffic, or the rest (compute)."""
    if host_gap_frac >= HOST_BOUND_GAP_FRAC:
        return "host-bound"
    return "memory-bound" if memory_bound_frac >= 0.5 else "compute-bound or mixed"


def score_table(df: pd.DataFrame, by: str) -> list[str]:
    lines = [f"| {by} | n | before: rules' estimate within ±{TOLERANCE} | fitted (held out) within ±{TOLERANCE} "
             "| interval covers measured | median abs error |", "|---|---:|---:|---:|---:|---:|"]
    for key, g in df.groupby(by):
        before = f"{within(g, 'before').sum()}/{len(g)}" if "before" in g else "—"
        lines.append(f"| {key} | {len(g)} | {before} | {within(g).sum()}/{len(g)} | {covered(g).sum()}/{len(g)} "
                     f"| {(g['value'] - g['measured']).abs().median():.2f} |")
    return lines


def summary(acts: pd.DataFrame, plans: pd.DataFrame) -> dict[str, float]:
    return {"actions": len(acts), "actions_within": float(within(acts).mean()),
            "actions_before": float(within(acts, "before").mean()), "actions_covered": float(covered(acts).mean()),
            "plans": len(plans), "plans_within": float(within(plans).mean()) if len(plans) else 0.0,
            "plans_covered": float(covered(plans).mean()) if len(plans) else 0.0}


def provenance(advice: pd.DataFrame, rows_used: int) -> dict:
    timed = advice[advice["kind"].isin(("action", "plan"))]
    dates = sorted(d for d in timed["date"].dropna().astype(str) if d)
    return {"gpu": "; ".join(sorted(set(timed["gpu"].dropna().astype(str)))),
            "commit": ", ".join(sorted(set(timed["commit"].dropna().astype(str)))),
            "date": f"{dates[0]} to {dates[-1]}" if dates else "", "rows_used": rows_used}


def render(acts: pd.DataFrame, plans: pd.DataFrame, prov: dict) -> str:
    s = summary(acts, plans)
    acts = acts.assign(mode_=acts["mode"], class_=[model_class(g, m) for g, m in
                                                    zip(acts["host_gap_frac"], acts["memory_bound_frac"])])
    plans = plans.assign(class_=[model_class(g, m) for g, m in zip(plans["host_gap_frac"], plans["memory_bound_frac"])])
    out = [f"**Fitted on** {prov['rows_used']} measured actions of benchmarks/data/advice.csv · {prov['gpu']} · "
           f"{prov['date']} · `benchmarks/advice/fit_action_gain.py` · "
           f"{commit_source(str(FIT_FILE.relative_to(ROOT)))}", "",
           f"Leave one model out (the model held out on every GPU): {s['actions_within']:.0%} of "
           f"{s['actions']} measured actions predicted within ±{TOLERANCE} of the measured gain (the rules' own "
           f"estimate: {s['actions_before']:.0%}); the 10th–90th percentile interval covers the measured gain "
           f"for {s['actions_covered']:.0%}. Plans: {s['plans_within']:.0%} of {s['plans']} within ±{TOLERANCE}, "
           f"interval covering {s['plans_covered']:.0%}.", "", "Per action family:", "",
           *score_table(acts.rename(columns={"family": "action family"}), "action family"), "",
           "Per model class (what sets the step's pace, from its host-gap and memory-bound shares):", "",
           *score_table(acts.rename(columns={"class_": "model class"}), "model class"), "",
           "Per mode (the sweeps measured inference only; no train sweep is in the CSV yet):", "",
           *score_table(acts.rename(columns={"mode_": "mode "}), "mode "), "",
           "Plans, per model class:", "", *score_table(plans.rename(columns={"class_": "model class"}), "model class")]
    return "\n".join(out)


def write_doc(text: str, doc: Path = DOC) -> None:
    doc.write_text(splice_block(doc.read_text(), text, BEGIN, END, "Predicted against measured, leave one model out"))


def fit_doc(fits: dict, prov: dict) -> dict:
    devices = {dev: {fam: {"coefficients": {k: round(v, 4) for k, v in f.coefficients.items()},
                           "residual_low": round(f.residual_low, 4), "residual_high": round(f.residual_high, 4),
                           "n": f.n} for fam, f in sorted(fams.items())} for dev, fams in sorted(fits.items())}
    return {"version": 1, "fitted_by": "benchmarks/advice/fit_action_gain.py", "source": "benchmarks/data/advice.csv",
            **prov, "features": list(FEATURES), "devices": devices}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--write", action="store_true", help="write the fit and the docs/accuracy.md table")
    args = ap.parse_args(argv)
    advice = read_advice(args.csv)
    rows, plans = action_rows(advice), plan_rows(advice)
    acts, held_plans = leave_one_model_out(rows, plans)
    acts["before"] = acts["predicted_frac"].clip(0.0, 1.0)
    prov = provenance(advice, len(rows))
    text = render(acts, held_plans, prov)
    print(text)
    if args.write:
        FIT_FILE.write_text(yaml.safe_dump(fit_doc(fit_all(rows), prov), sort_keys=False))
        write_doc(text)
        print(f"wrote {FIT_FILE.relative_to(ROOT)} and {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
