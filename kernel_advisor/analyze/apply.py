"""Analyze a freshly attributed op table: costs, ceilings, roofline verdicts, coverage."""
from __future__ import annotations

import dataclasses

import pandas as pd

from kernel_advisor.analyze.ceilings import calibration_provenance, resolve_ceilings
from kernel_advisor.analyze.roofline import classify, coverage
from kernel_advisor.records.run import RunMeta


def analyze_ops(ops: pd.DataFrame, meta: RunMeta) -> tuple[pd.DataFrame, dict, dict]:
    """(ops with analyze columns, ceilings as recorded in run.json, coverage)."""
    device = RunMeta.of(meta).device
    ceilings = resolve_ceilings(device["name"], device.get("driver", ""), device_type=device["type"])
    analyzed = classify(ops, ceilings, meta)
    recorded = dataclasses.asdict(ceilings)
    if "measured" in ceilings.origins.values():
        # When and how noisily the cached figures were measured travels with the run, so every
        # reader of it (profile's summary, the report) can say so.
        recorded["calibration"] = calibration_provenance(device["name"], device.get("driver", ""))
    return analyzed, recorded, coverage(analyzed)
