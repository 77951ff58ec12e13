"""Read the optional files other commands add to a run: recommendations.json, try_kernel.json.

recommendations.json is read through its record (records/recommendations.py), which fails
loudly on another schema. try_kernel.json is displayed as written: scalar fields and one
mapping per variant.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from kernel_advisor.errors import UserInputError
from kernel_advisor.records.base import parse_json
from kernel_advisor.records.recommendations import RecommendationEntry, RecommendationsRecord

TRY_KERNEL_FILE = "try_kernel.json"
_VARIANT_LIST_KEYS = ("variants", "results", "candidates")


@dataclass(frozen=True)
class TryKernelResults:
    """try_kernel.json: scalar fields of the whole attempt, and one mapping per variant."""

    summary: Mapping[str, Any]
    variants: tuple[Mapping[str, Any], ...]


def _read_json(path: Path) -> Any:
    return parse_json(path, "delete it and rerun the command that wrote it")


def load_recommendations(run_dir: Path) -> tuple[RecommendationEntry, ...] | None:
    """The run's recommendations, or None when `advisor recommend` has not written any."""
    record = RecommendationsRecord.read(run_dir)
    return None if record is None else record.recommendations


def load_try_kernel(run_dir: Path) -> TryKernelResults | None:
    """The run's try-kernel results, or None when `advisor try-kernel` has not written any."""
    path = Path(run_dir) / TRY_KERNEL_FILE
    if not path.is_file():
        return None
    data = _read_json(path)
    if isinstance(data, list):
        return TryKernelResults(summary={}, variants=tuple(v for v in data if isinstance(v, dict)))
    if not isinstance(data, dict):
        raise UserInputError(f"{path} is neither an object nor a list", "rerun `advisor try-kernel`")
    list_key = next((k for k in _VARIANT_LIST_KEYS if isinstance(data.get(k), list)), None)
    variants = tuple(v for v in data.get(list_key, []) if isinstance(v, dict)) if list_key else ()
    summary = {k: v for k, v in data.items() if k != list_key}
    return TryKernelResults(summary=summary, variants=variants)
