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
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

from kernel_advisor.located_yaml import load_checked
from kernel_advisor.recommend.calibration import action_family

FIT_FILE = Path(__file__).resolve().parents[1] / "data" / "action_gain_fit.yaml"
VERSION = 1
FEATURES = ("predicted_frac", "host_gap_frac", "memory_bound_frac")
DEFAULT_FAMILY = "default"
HOTSPOT_MIN_SHARE_PCT = 2.0  # the CSV keeps hotspots of at least this share; the fit saw no others
MEMORY_VERDICTS = ("memory-bound", "latency-bound", "under-occupied")
_SCHEMA = {"version": "int", "fitted_by?": "str", "source?": "str", "gpu?": "str", "commit?": "str",
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
    doc, _ = load_checked(path, _SCHEMA, VERSION)
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
