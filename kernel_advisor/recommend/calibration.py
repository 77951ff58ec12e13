"""Gain estimates corrected by what `recommend --measure` measured on the advice benchmark.

kernel_advisor/data/gain_calibration.yaml holds, per device type and action, a scale fitted
by benchmarks/advice/fit_gain.py: least squares through the origin of each action's measured
gain in the whole model against its predicted gain (the union of the rows it fixes), over
the benchmark's actions that measured faster. Bundled kernels share one scale ("kernel").
An action without enough measurements keeps its model's estimate. The file says where the
fit came from; docs/benchmarks.md shows predicted against measured before and after.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from kernel_advisor.located_yaml import load_checked
from kernel_advisor.recommend.gain import GainEstimate

CALIBRATION_FILE = Path(__file__).resolve().parents[1] / "data" / "gain_calibration.yaml"
PSEUDO_ROW_PREFIX = ("host-gaps", "exposed-comm")  # savings not bounded by one op's time
ENV = "ADVISOR_GAIN_CALIBRATION"  # "off": the gain model's own estimates; a path: another fit
VERSION = 2
# Provenance keys are optional: a fit of one's own ($ADVISOR_GAIN_CALIBRATION) may omit them.
_SCHEMA = {"version": "int", "fitted_by?": "str", "source?": "str", "gpu?": "str", "commit?": "str", "date?": "str",
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
    doc, _ = load_checked(path, _SCHEMA, VERSION)
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
        if not row.startswith(PSEUDO_ROW_PREFIX):
            # NB: a fix cannot save more of an op than the op takes; the rest of a measured gain
            # (a whole-model compile, say) is what the plan's measurement is for.
            scaled = min(scaled, row_time_per_step_s.get(int(row), scaled))
        rows[row] = scaled
    basis = f"{gain.basis}; × {fit.scale:.2f} fitted to {fit.n} measurements of {action_family(action)}"
    return GainEstimate(sum(rows.values()), rows, basis)
