"""Read the optional files other commands add to a run: recommendations.json, try_kernel.json.

Their writers (`advisor recommend`, `advisor try-kernel`) own the format; the report and
`advisor compare` only display them, so they are read defensively: a field we do not know
is kept and shown as it is, a field we expect but do not find is None. Units come from the
project's name suffixes (`_s`, `_frac`, `_pct`), never from guessing at values.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kernel_advisor.errors import UserInputError

RECOMMENDATIONS_FILE = "recommendations.json"
TRY_KERNEL_FILE = "try_kernel.json"
_RULE_KEYS = ("rule_id", "rule", "id")
_KNOWN_KEYS = frozenset(_RULE_KEYS + ("tier", "title", "message", "evidence"))
_VARIANT_LIST_KEYS = ("variants", "results", "candidates")
_ROW_ID_DEPTH = 3  # row ids sit in the item, its evidence, or one subject inside the evidence


@dataclass(frozen=True)
class Recommendation:
    """One recommendation as `advisor recommend` stored it."""

    rule_id: str
    tier: str
    title: str
    message: str
    evidence: Any
    gain_key: str | None  # the field the estimated gain came from, e.g. "estimated_gain_per_step_s"
    estimated_gain_s: float | None
    estimated_gain_frac: float | None
    row_ids: tuple[int, ...]  # ops.csv rows the recommendation is about; () for run-wide ones
    extra: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TryKernelResults:
    """try_kernel.json: scalar fields of the whole attempt, and one mapping per variant."""

    summary: Mapping[str, Any]
    variants: tuple[Mapping[str, Any], ...]


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise UserInputError(f"{path} is not valid JSON ({e})",
                             "delete it and rerun the command that wrote it") from None


def load_recommendations(run_dir: Path) -> tuple[Recommendation, ...] | None:
    """The run's recommendations, or None when `advisor recommend` has not written any."""
    path = Path(run_dir) / RECOMMENDATIONS_FILE
    if not path.is_file():
        return None
    data = _read_json(path)
    items = data.get("recommendations", []) if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise UserInputError(f"{path} holds no list of recommendations",
                             "rerun `advisor recommend` to rewrite it")
    return tuple(_recommendation(item) for item in items if isinstance(item, dict))


def _recommendation(item: dict) -> Recommendation:
    rule_id = next((str(item[k]) for k in _RULE_KEYS if item.get(k) is not None), "")
    gain_key, gain_s = _gain(item, "_s")
    frac_key, gain_frac = _gain(item, "_frac")
    if gain_frac is None:
        frac_key, pct = _gain(item, "_pct")
        gain_frac = pct / 100 if pct is not None else None
    extra = {k: v for k, v in item.items() if k not in _KNOWN_KEYS and k not in (gain_key, frac_key)}
    return Recommendation(
        rule_id=rule_id, tier=str(item.get("tier") or ""), title=str(item.get("title") or rule_id),
        message=str(item.get("message") or ""), evidence=item.get("evidence"),
        gain_key=gain_key, estimated_gain_s=gain_s, estimated_gain_frac=gain_frac,
        row_ids=tuple(sorted(set(_row_ids(item, _ROW_ID_DEPTH)))), extra=extra)


def _gain(item: dict, suffix: str) -> tuple[str | None, float | None]:
    """The first numeric field whose name mentions a gain and ends in `suffix`; per step first."""
    candidates = [(k, v) for k, v in item.items() if "gain" in k and k.endswith(suffix) and _is_number(v)]
    nested = item.get("estimated_gain")
    if isinstance(nested, dict):
        candidates += [(f"estimated_gain.{k}", v) for k, v in nested.items()
                       if k.endswith(suffix) and _is_number(v)]
    candidates.sort(key=lambda kv: "per_step" not in kv[0])  # stable: per-step values win
    return (candidates[0][0], float(candidates[0][1])) if candidates else (None, None)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _row_ids(value: Any, depth: int) -> list[int]:
    if depth < 0:
        return []
    if isinstance(value, list):
        return [r for v in value for r in _row_ids(v, depth - 1)]
    if not isinstance(value, dict):
        return []
    found = [int(value["row_id"])] if _is_number(value.get("row_id")) and value["row_id"] >= 0 else []
    ids = value.get("row_ids")
    if isinstance(ids, list):
        found += [int(i) for i in ids if _is_number(i) and i >= 0]
    for key in ("evidence", "subject", "subjects", "op", "ops", "rows"):
        found += _row_ids(value.get(key), depth - 1)
    return found


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
