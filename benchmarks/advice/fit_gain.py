"""Fit the gain model's per-action scales to what `recommend --measure` measured on the advice set.

    python3 benchmarks/advice/fit_gain.py [--csv benchmarks/data/advice.csv] [--write]

An action is measured on the whole model, so it is compared with its prediction on the whole
model: the union, row by row, of the recommendations it carries out (compile's own, and
pad_gemm's, which inductor's shape padding does too; actions.fixed_by). The CSV's `action`
rows hold that union as the advisor computed it; older sweeps without them get it rebuilt
from the `rule` rows. Per device type and action family (bundled kernels share "kernel"),
over the actions that measured faster: scale = Σ p·m / Σ p² (least squares through the
origin). Printed: share within ±0.15 of measured before, after (in sample) and
leave-one-model-out.

The CSV's predictions already carry the scales in force when the sweep ran (recommend
applies them), so a fit on them is a correction factor: the scale written is the shipped
one times that factor. `--write` stores them in kernel_advisor/data/gain_calibration.yaml only
when the leave-one-model-out share beats "before" (a fit that predicts held-out models worse
than the scales in force is not kept); `--force` writes anyway.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Mapping

import pandas as pd
import yaml

from kernel_advisor.actions import fixed_by
from kernel_advisor.recommend.gain_fit import ActionScale, action_family, load_calibration
from kernel_advisor.recommend.report import MAX_GAIN_FRAC
from kernel_advisor.records.recommendations import subject_key_rows

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_CSV = ROOT / "benchmarks" / "data" / "advice.csv"
OUT = ROOT / "kernel_advisor" / "data" / "gain_calibration.yaml"
TOLERANCE = 0.15  # of the step: the measured-advice aim
MIN_POINTS = 3
TIMED_KINDS = ("rule", "also", "action")


def _device_type(name) -> str:
    return "cpu" if str(name).lower() == "cpu" else "cuda"


def union_predicted(rules: pd.DataFrame, action: str) -> float | None:
    """The rule rows' union for `action`: a subject inside another's of a carried-out action counts once.

    # NB: the CSV keeps one figure per recommendation, not per row, so two subjects that only
    # partly overlap both count; the advisor itself takes the per-row maximum (recommend/report.py).
    """
    names = fixed_by(action)
    mine = rules[rules["action"].isin(names)].dropna(subset=["predicted_gain_frac"])
    if mine.empty:
        return None
    subjects = [(subject_key_rows(s) or frozenset({s}), p) for s, p in zip(mine["subject"], mine["predicted_gain_frac"])]
    best: dict[frozenset, float] = {}
    for rows, p in subjects:
        if not any(rows < other for other, _ in subjects):
            best[rows] = max(best.get(rows, 0.0), float(p))
    return min(sum(best.values()), MAX_GAIN_FRAC)


def action_rows(advice: pd.DataFrame) -> pd.DataFrame:
    """One row per (device type, model, measured action): predicted (union) and measured gain."""
    timed = advice[advice["kind"].isin(TIMED_KINDS) & (advice["status"] == "passed")]
    out = []
    for (device, model, action), g in timed.groupby(["device_name", "model", "action"]):
        stated = g[g["kind"] == "action"]["predicted_gain_frac"].dropna()
        rules = advice[(advice["model"] == model) & (advice["device_name"] == device) & (advice["kind"] == "rule")]
        predicted = float(stated.iloc[0]) if len(stated) else union_predicted(rules, action)
        measured = g.dropna(subset=["measured_gain_frac"])
        if predicted is None or measured.empty:
            continue
        out.append({"device_type": _device_type(device), "model": model, "action": action,
                    "family": action_family(action), "predicted": predicted,
                    "measured": float(measured["measured_gain_frac"].iloc[0]), "verdict": measured["verdict"].iloc[0]})
    return pd.DataFrame(out, columns=["device_type", "model", "action", "family", "predicted", "measured", "verdict"])


def fit_scales(rows: pd.DataFrame, min_points: int = MIN_POINTS) -> dict[tuple[str, str], tuple[float, int]]:
    """{(device type, action family): (scale, n)} from the actions that measured faster."""
    out = {}
    faster = rows[(rows["verdict"] == "faster") & (rows["predicted"] > 0)]
    for (device, family), g in faster.groupby(["device_type", "family"]):
        if len(g) >= min_points:
            out[(device, family)] = (float((g["predicted"] * g["measured"]).sum() / (g["predicted"] ** 2).sum()),
                                     len(g))
    return out


def predicted_after(rows: pd.DataFrame, scales: dict) -> pd.Series:
    # NB: the shipped correction scales each recommendation and caps each op's saving at the op's
    # time; the CSV has no per-op times, so this evaluation caps the whole action at the step.
    factor = rows.apply(lambda r: scales.get((r["device_type"], r["family"]), (1.0, 0))[0], axis=1)
    return (rows["predicted"] * factor).clip(upper=MAX_GAIN_FRAC)


def share_within(rows: pd.DataFrame, predicted: pd.Series, tolerance: float = TOLERANCE) -> float:
    faster = rows["verdict"] == "faster"
    if not faster.any():
        return float("nan")
    return float(((predicted[faster] - rows.loc[faster, "measured"]).abs() <= tolerance).mean())


def leave_one_model_out(rows: pd.DataFrame) -> pd.Series:
    """Each model's prediction with scales fitted on the other models only."""
    out = pd.Series(index=rows.index, dtype=float)
    for model in rows["model"].unique():
        held = rows["model"] == model
        out[held] = predicted_after(rows[held], fit_scales(rows[~held]))
    return out


def composed_scales(factors: dict, shipped: Mapping[str, Mapping[str, ActionScale]]) -> dict:
    """{(device type, family): (scale, n)}: each fitted factor times the scale the sweep ran under;
    a shipped scale with no new fit is kept as it is."""
    out = {(device, family): (s.scale, s.n) for device, families in shipped.items() for family, s in families.items()}
    for (device, family), (factor, n) in factors.items():
        before = shipped.get(device, {}).get(family)
        out[(device, family)] = (factor * (before.scale if before else 1.0), n)
    return out


def keep_fit(before: float, held_out: float) -> bool:
    """A refit is kept only when it predicts models it was not fitted on better than the scales in force."""
    return held_out > before


def calibration_doc(scales: dict, advice: pd.DataFrame, csv: Path) -> dict:
    devices: dict = {}
    for (device, family), (scale, n) in sorted(scales.items()):
        devices.setdefault(device, {})[family] = {"scale": round(scale, 4), "n": n}
    first = advice.iloc[0] if len(advice) else {}
    return {"version": 2, "fitted_by": "benchmarks/advice/fit_gain.py", "source": str(csv.relative_to(ROOT)),
            "gpu": str(first.get("gpu", "")), "commit": str(first.get("commit", "")),
            "date": str(first.get("date", "")), "devices": devices}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--write", action="store_true",
                    help=f"write {OUT.relative_to(ROOT)} when the fit predicts held-out models better")
    ap.add_argument("--force", action="store_true", help="with --write: write even when it does not")
    args = ap.parse_args(argv)
    advice = pd.read_csv(args.csv, dtype={"subject": str, "action": str}).fillna({"subject": "", "action": ""})
    rows = action_rows(advice)
    factors = fit_scales(rows)
    before, held_out = share_within(rows, rows["predicted"]), share_within(rows, leave_one_model_out(rows))
    print(f"{len(rows)} measured actions, {int((rows['verdict'] == 'faster').sum())} faster")
    print(f"within ±{TOLERANCE}: before {before:.0%} (the scales in force), "
          f"after {share_within(rows, predicted_after(rows, factors)):.0%} (in sample), "
          f"{held_out:.0%} (leave one model out)")
    scales = composed_scales(factors, load_calibration(OUT))
    for (device, family), (scale, n) in sorted(scales.items()):
        factor = f"× {factors[(device, family)][0]:.2f}" if (device, family) in factors else "kept"
        print(f"  {device:5} {family:36} {factor:>6} → scale {scale:.2f}  (n={n})")
    if args.write and not (keep_fit(before, held_out) or args.force):
        print(f"not written: leave-one-model-out {held_out:.0%} does not beat {before:.0%} (--force writes anyway)")
    elif args.write:
        OUT.write_text(yaml.safe_dump(calibration_doc(scales, advice, args.csv.resolve()), sort_keys=False))
        print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
