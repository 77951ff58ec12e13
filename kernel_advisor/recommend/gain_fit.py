"""An action's gain on the whole model, predicted from features of the run, with an interval.

kernel_advisor/data/action_gain_fit.yaml holds, per device type and action family, the
coefficients of a linear model fitted by benchmarks/advice/fit_action_gain.py (least absolute
deviations, coefficients ≥ 0, so a larger feature never predicts a smaller gain) and the 10th
and 90th percentiles of its residuals. Features, each a share of the step:

- `predicted_frac`: the rules' own estimate for the action (the union of the rows it fixes);
- `host_gap_frac`: the step's device-idle share, as the CUDA-graphs rule claims it;
- `memory_bound_frac`: the step's share in hotspots (≥ 2 % of device time) that are memory- or
  latency-bound and below their roof (no leave-it verdict).

A family the fit has no entry for falls back to `default`. The interval is the value plus
the residual percentiles, held to [-1, 1] (a negative low end: it may measure slower).
"""
from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from kernel_advisor.located_yaml import load_checked
from kernel_advisor.recommend.gain import GainEstimate

FIT_FILE = Path(__file__).resolve().parents[1] / "data" / "action_gain_fit.yaml"
FIT_VERSION = 1
FEATURES = ("predicted_frac", "host_gap_frac", "memory_bound_frac")
DEFAULT_FAMILY = "default"
HOTSPOT_MIN_SHARE_PCT = 2.0  # the CSV keeps hotspots of at least this share; the fit saw no others
MEMORY_VERDICTS = ("memory-bound", "latency-bound", "under-occupied")
_FIT_SCHEMA = {"version": "int", "fitted_by?": "str", "source?": "str", "gpu?": "str", "commit?": "str",
           "date?": "str", "rows_used?": "int", "features?": ["str"],
           "devices": {"*": {"*": {"coefficients": {"*": "num"}, "residual_low": "num", "residual_high": "num",
                                   "n": "int"}}}}


@dataclass(frozen=True)
class GainInterval:
    value: float  # what the ranking uses
    low: float
    high: float

    def to_dict(self) -> dict[str, float]:
        return {"value": self.value, "low": self.low, "high": self.high}


@dataclass(frozen=True)
class FamilyFit:
    coefficients: Mapping[str, float]
    residual_low: float  # measured − predicted, 10th percentile
    residual_high: float  # 90th percentile
    n: int


def _unit(x: float) -> float:
    return min(max(x, 0.0), 1.0)


def memory_bound_frac(hotspots: Iterable[tuple[float | None, str, str]], host_gap_frac: float) -> float:
    """Share of the step in memory-bound hotspots below their roof: (share % of device time, verdict,
    chosen tier) each; device time is the step less its idle gaps."""
    device_share_pct = sum(share or 0.0 for share, verdict, tier in hotspots
                           if (share or 0.0) >= HOTSPOT_MIN_SHARE_PCT and verdict in MEMORY_VERDICTS
                           and tier != "leave-it")
    return _unit(device_share_pct / 100.0 * (1.0 - _unit(host_gap_frac)))


def predicted_gain_interval(features: Mapping[str, float], fit: FamilyFit) -> GainInterval:
    """The fitted value and its residual interval, each a share of the step in [0, 1]."""
    raw = sum(fit.coefficients.get(k, 0.0) * float(features.get(k, 0.0)) for k in FEATURES)
    value = _unit(raw)
    # The low end may go below 0: an action can measure slower than eager, and an interval that
    # could not say so would never cover those.
    low = max(min(value, raw + fit.residual_low), -1.0)
    return GainInterval(value, low, _unit(max(value, raw + fit.residual_high)))


def combined_interval(parts: Iterable[GainInterval]) -> GainInterval:
    """Actions applied together: each takes its share of what the others left.

    # NB: assumes the actions save time on different ops; where they overlap (two compile modes
    # on one chain) this over-counts, which the plan's own measurement settles.
    """
    keep = {"value": 1.0, "low": 1.0, "high": 1.0}
    for p in parts:
        keep = {k: keep[k] * (1.0 - getattr(p, k)) for k in keep}
    return GainInterval(1.0 - keep["value"], 1.0 - keep["low"], 1.0 - keep["high"])


@functools.lru_cache(maxsize=1)
def load_gain_fit(path: Path = FIT_FILE) -> Mapping[str, Mapping[str, FamilyFit]]:
    """{device type: {action family: fit}}; empty when no fit has been made."""
    if not path.is_file():
        return {}
    doc, _ = load_checked(path, _FIT_SCHEMA, FIT_VERSION)
    return {device: {family: FamilyFit({k: float(c) for k, c in v["coefficients"].items()},
                                       float(v["residual_low"]), float(v["residual_high"]), int(v["n"]))
                     for family, v in families.items()}
            for device, families in doc["devices"].items()}


def family_fit(action: str, device_type: str,
               table: Mapping[str, Mapping[str, FamilyFit]] | None = None) -> FamilyFit | None:
    fits = (load_gain_fit() if table is None else table).get(device_type, {})
    return fits.get(action_family(action)) or fits.get(DEFAULT_FAMILY)


def finite_or_zero(x) -> float:
    try:
        x = float(x)
    except (TypeError, ValueError):
        return 0.0
    return x if math.isfinite(x) else 0.0


# ------------------------------------------------------------
# Gain estimates corrected by what `recommend --measure` measured on the advice benchmark.
#
# kernel_advisor/data/gain_calibration.yaml holds, per device type and action, a scale fitted
# by benchmarks/advice/fit_gain.py: least squares through the origin of each action's measured
# gain in the whole model against its predicted gain (the union of the rows it fixes), over
# the benchmark's actions that measured faster. Bundled kernels share one scale ("kernel").
# An action without enough measurements keeps its model's estimate. The file says where the
# fit came from; docs/benchmarks.md shows predicted against measured before and after.

CALIBRATION_FILE = Path(__file__).resolve().parents[1] / "data" / "gain_calibration.yaml"
ENV = "ADVISOR_GAIN_CALIBRATION"  # "off": the gain model's own estimates; a path: another fit
CALIBRATION_VERSION = 2
# Provenance keys are optional: a fit of one's own ($ADVISOR_GAIN_CALIBRATION) may omit them.
_CALIBRATION_SCHEMA = {"version": "int", "fitted_by?": "str", "source?": "str", "gpu?": "str", "commit?": "str", "date?": "str",
           "devices": {"*": {"*": {"scale": "pos", "n": "int"}}}}


@dataclass(frozen=True)
class ActionScale:
    scale: float
    n: int  # measurements the fit used


@functools.lru_cache(maxsize=1)
def load_calibration(path: Path = CALIBRATION_FILE) -> Mapping[str, Mapping[str, ActionScale]]:
    """{device type: {action family: scale}}; empty when no fit has been made."""
    if not path.is_file():
        return {}
    doc, _ = load_checked(path, _CALIBRATION_SCHEMA, CALIBRATION_VERSION)
    return {device: {action: ActionScale(float(v["scale"]), int(v["n"])) for action, v in actions.items()}
            for device, actions in doc["devices"].items()}


def active_calibration() -> Mapping[str, Mapping[str, ActionScale]]:
    """The scales in force: the shipped fit, another file named by $ADVISOR_GAIN_CALIBRATION, or none ("off")."""
    setting = os.environ.get(ENV, "").strip()
    if setting.lower() == "off":
        return {}
    return load_calibration(Path(setting) if setting else CALIBRATION_FILE)


def action_family(action: str) -> str:
    """The key an action's scale is fitted under: bundled kernels share one."""
    return "kernel" if action.startswith("kernel:") else action


def calibrated(gain: GainEstimate, action: str, device_type: str, row_time_per_step_s: Mapping[int, float],
               table: Mapping[str, Mapping[str, ActionScale]] | None = None) -> GainEstimate:
    """`gain` scaled by its action's fitted factor on this device type; each op's saving stays below its time."""
    fit = (active_calibration() if table is None else table).get(device_type, {}).get(action_family(action))
    if fit is None or gain.saving_per_step_s is None or fit.scale == 1.0 or gain.measured:
        return gain
    rows = {}
    for row, saving in gain.row_saving_per_step_s.items():
        scaled = saving * fit.scale
        if row.is_row:  # host gaps and exposed communication are not one op's time
            # NB: a fix cannot save more of an op than the op takes; the rest of a measured gain
            # (a whole-model compile, say) is what the plan's measurement is for.
            scaled = min(scaled, row_time_per_step_s.get(row.row_id, scaled))
        rows[row] = scaled
    basis = f"{gain.basis}; × {fit.scale:.2f} fitted to {fit.n} measurements of {action_family(action)}"
    return GainEstimate(sum(rows.values()), rows, basis)
