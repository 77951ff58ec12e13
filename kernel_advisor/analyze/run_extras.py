"""Read the optional files other commands add to a run: recommendations.json, try_kernel.json.

Each is read through its record (records/recommendations.py, records/try_kernel.py), which
fails loudly on another schema, a missing key or a key of the wrong type.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from kernel_advisor.records.recommendations import RecommendationEntry, RecommendationsRecord
from kernel_advisor.records.try_kernel import FILE as TRY_KERNEL_FILE  # noqa: F401 (re-exported)
from kernel_advisor.records.try_kernel import TryKernelRecord


@dataclass(frozen=True)
class TryKernelResults:
    """try_kernel.json: scalar fields of the whole attempt, and one mapping per variant."""

    summary: Mapping[str, Any]
    variants: tuple[Mapping[str, Any], ...]


def load_recommendations(run_dir: Path) -> tuple[RecommendationEntry, ...] | None:
    """The run's recommendations, or None when `advisor recommend` has not written any."""
    record = RecommendationsRecord.read(run_dir)
    return None if record is None else record.recommendations


def load_try_kernel(run_dir: Path) -> TryKernelResults | None:
    """The run's try-kernel results, or None when `advisor try-kernel` has not written any."""
    record = TryKernelRecord.read(run_dir)
    return None if record is None else TryKernelResults(summary=record.summary(), variants=record.variants)
