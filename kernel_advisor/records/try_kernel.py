"""try_kernel.json: the record `advisor try-kernel` saves into the model's run and the report reads.

Schema 1: the attempt (model, device, mode, dtype, timing, float64 reference, notes), one
mapping per variant as trykernel/results.py's VariantResult, and what the command adds
(`created`, `run`, `args`). A reader refuses another schema_version, a missing key and a
key of the wrong type, each with one line naming the file. Variant keys added since the
first schema-1 file (member_calls, graph_breaks, break_reasons, speedup_vs_compile,
verdict_vs_compile, eager_routed_calls, eager_routes) are optional to readers.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from kernel_advisor.records.base import RecordError, check_record, read_json, strict

SCHEMA_VERSION = 1
FILE = "try_kernel.json"
RERUN = "`advisor try-kernel`"

# The attempt's scalar fields, each a str.
SUMMARY_KEYS = ("model", "device", "mode", "dtype", "timing", "float64_reference")
REQUIRED = (*SUMMARY_KEYS, "variants", "notes")
# Every variant holds these (trykernel/results.py VariantResult, its fields without defaults).
VARIANT_KEYS = ("name", "kind", "kernel_ids", "targets", "status", "reason", "calls", "fallback_calls",
                "fallback_reasons", "gate", "timing_label", "step_s", "speedup", "verdict", "op",
                "peak_memory_bytes", "prediction", "suspect", "compile_s")
_NONE = type(None)
_VARIANT_TYPES: Mapping[str, tuple[type, ...]] = {
    "name": (str,), "kind": (str,), "kernel_ids": (list,), "targets": (list,), "status": (str,), "reason": (str,),
    "calls": (int,), "fallback_calls": (int,), "fallback_reasons": (list,), "gate": (dict, _NONE),
    "timing_label": (str,), "step_s": (dict, _NONE), "speedup": (dict, _NONE), "verdict": (str,),
    "op": (dict, _NONE), "peak_memory_bytes": (int, _NONE), "prediction": (dict, _NONE), "suspect": (str,),
    "compile_s": (int, float, _NONE),
}


@dataclass(frozen=True)
class TryKernelRecord:
    model: str
    device: str
    mode: str
    dtype: str
    timing: str  # "CUDA events", "CPU timing", "none (check only)"
    float64_reference: str
    variants: tuple[Mapping[str, Any], ...]
    notes: tuple[str, ...]
    rest: Mapping[str, Any] = field(default_factory=dict)  # created, run, args

    def to_json(self) -> dict[str, Any]:
        """The document: schema_version, what the command adds, the attempt; NaN/±Inf as null."""
        body = {k: getattr(self, k) for k in SUMMARY_KEYS}
        return strict({"schema_version": SCHEMA_VERSION, **self.rest, **body, "variants": self.variants,
                       "notes": self.notes})

    def summary(self) -> dict[str, Any]:
        """Everything but the variants, as written (schema_version and notes included)."""
        return {k: v for k, v in self.to_json().items() if k != "variants"}

    @classmethod
    def from_json(cls, doc: Any, source: str | Path = FILE) -> "TryKernelRecord":
        check_record(doc, source, SCHEMA_VERSION, REQUIRED, RERUN)
        wrong = [k for k in SUMMARY_KEYS if not isinstance(doc[k], str)]
        wrong += [k for k in ("variants", "notes") if not isinstance(doc[k], list)]
        if not wrong and not all(isinstance(n, str) for n in doc["notes"]):
            wrong.append("notes")
        _refuse_wrong(source, wrong)
        for i, variant in enumerate(doc["variants"]):
            where = f"{source} (variant {i})"
            if not isinstance(variant, dict):
                _refuse_wrong(source, [f"variants[{i}]"])
            check_record({"schema_version": SCHEMA_VERSION, **variant}, where, SCHEMA_VERSION, VARIANT_KEYS, RERUN)
            _refuse_wrong(where, [k for k, types in _VARIANT_TYPES.items() if not _is(variant[k], types)])
        rest = {k: v for k, v in doc.items() if k not in REQUIRED and k != "schema_version"}
        return cls(**{k: doc[k] for k in SUMMARY_KEYS}, variants=tuple(doc["variants"]), notes=tuple(doc["notes"]),
                   rest=rest)

    @classmethod
    def read(cls, run_dir: Path) -> "TryKernelRecord | None":
        """The run's record, or None when `advisor try-kernel` has not saved one there."""
        path = Path(run_dir) / FILE
        return cls.from_json(read_json(path, RERUN), path) if path.is_file() else None


def _is(value: Any, types: tuple[type, ...]) -> bool:
    return bool in types if isinstance(value, bool) else isinstance(value, types)


def _refuse_wrong(source: str | Path, wrong: list[str]) -> None:
    if wrong:
        raise RecordError(f"{source} is damaged: {', '.join(wrong)} {'has' if len(wrong) == 1 else 'have'} "
                          "the wrong type", f"delete it and rerun {RERUN}")


@dataclass(frozen=True)
class TryKernelResults:
    """try_kernel.json as the report reads it: scalar fields of the whole attempt, and one mapping per variant."""

    summary: Mapping[str, Any]
    variants: tuple[Mapping[str, Any], ...]


def load_try_kernel(run_dir: Path) -> TryKernelResults | None:
    """The run's try-kernel results, or None when `advisor try-kernel` has not written any."""
    record = TryKernelRecord.read(run_dir)
    return None if record is None else TryKernelResults(summary=record.summary(), variants=record.variants)
