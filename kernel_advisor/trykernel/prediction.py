"""What `recommend` (or the run's op shares) predicted, next to what was measured.

Amdahl: a kernel that makes an op with share s of the step k× faster saves
s × (1 − 1/k) of the step. The share comes from the run's ops.csv where its rows name the
replaced ops; module patterns have no row, so their share is the eager per-op time over
the eager device time measured here. A prediction from the run's recommendations.json
(see docs/try-kernel.md for the keys read) takes precedence.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from kernel_advisor.records.base import RecordError
from kernel_advisor.records.recommendations import RecommendationsRecord
from kernel_advisor.trykernel.results import OpTiming, Prediction


@dataclass(frozen=True)
class RunEvidence:
    run_path: str = ""
    op_share_pct: Mapping[str, float] = field(default_factory=dict)  # ops.csv name -> summed share_pct
    recommended_gain_frac: Mapping[str, float] = field(default_factory=dict)  # kernel id -> predicted gain


def evidence_from_run(run_path: Path, ops) -> RunEvidence:
    """Shares from ops.csv (a DataFrame with name, share_pct) and gains from recommendations.json."""
    shares: dict[str, float] = {}
    if ops is not None and {"name", "share_pct"} <= set(ops.columns):
        for name, pct in zip(ops["name"], ops["share_pct"]):
            shares[str(name)] = shares.get(str(name), 0.0) + float(pct)
    return RunEvidence(str(run_path), shares, read_recommended_gains(run_path))


def read_recommended_gains(run_dir: Path) -> dict[str, float]:
    """kernel id -> predicted gain fraction (the largest of the recommendations naming it), from
    the run's recommendations.json; none when the run has no readable one (try-kernel then
    predicts from ops.csv's shares: a stale or damaged file must not stop the attempt)."""
    try:
        record = RecommendationsRecord.read(Path(run_dir))
    except (RecordError, OSError):
        return {}
    gains: dict[str, float] = {}
    for entry in record.recommendations if record is not None else ():
        if entry.kernel_id and isinstance(entry.estimated_gain_frac, (int, float)):
            gains[entry.kernel_id] = max(gains.get(entry.kernel_id, 0.0), float(entry.estimated_gain_frac))
    return gains


def predict(kernel_ids: tuple[str, ...], evidence: RunEvidence, op: OpTiming | None,
            eager_device_s: float, measured_gain_frac: float) -> Prediction | None:
    recommended = [evidence.recommended_gain_frac[k] for k in kernel_ids if k in evidence.recommended_gain_frac]
    if recommended and len(recommended) == len(kernel_ids):
        # NB: gains of different ops add when the ops do not overlap in time
        return Prediction(sum(recommended), "recommendations.json", measured_gain_frac)
    if op is None or not math.isfinite(op.speedup) or op.speedup <= 0:
        return None
    share_pct = sum(evidence.op_share_pct.get(n, 0.0) for n in op.names)
    if share_pct > 0:
        share, source = share_pct / 100.0, f"ops.csv share {share_pct:.1f}% × measured op speedup"
    elif eager_device_s > 0:
        share, source = op.baseline_s / eager_device_s, "share measured here × measured op speedup"
    else:
        return None
    return Prediction(share * (1.0 - 1.0 / op.speedup), source, measured_gain_frac)
