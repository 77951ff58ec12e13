"""recommendations.json: the record `advisor recommend` writes and the report and `compare` read.

Schema 3. Every recommendation names its action; `measured` (and the top-level `plan`,
`also`, `measurement`) are filled by `--measure` and null otherwise (docs/measure.md). Its
evidence keys that echo ops.csv columns carry their scope as the columns do
(`device_time_per_call_s`, `flops_per_call`: records/columns.py). A file of another schema is
refused with the fix (rerun `advisor recommend`): it is derived from the run, never migrated.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

from kernel_advisor.records.base import check_record, read_json, strict

SCHEMA_VERSION = 3
FILE = "recommendations.json"
RERUN = "`advisor recommend`"


@dataclass(frozen=True)
class MeasuredOutcome:
    """What `--measure` found for one recommendation's action (measure/document.py writes it)."""

    status: str  # passed | failed-gate | not-applied | not-measurable | error
    reason: str
    applied: str
    speedup: Mapping[str, float | None] | None  # {value, low, high}: eager / variant, 95 % interval
    gain_frac: float | None  # 1 - variant / eager median step
    verdict: str  # faster | slower | no measurable difference | "" (untimed)
    step_s: Mapping[str, float | None] | None
    gate: Mapping[str, Any] | None

    @classmethod
    def from_json(cls, doc: Mapping[str, Any] | None) -> "MeasuredOutcome | None":
        return None if doc is None else cls(**{f.name: doc[f.name] for f in fields(cls)})


@dataclass(frozen=True)
class RecommendationEntry:
    rank: int
    rule_id: str
    tier: str
    title: str
    scope: str
    subject: str
    label: str
    row_ids: tuple[int, ...]
    message: str
    estimated_gain_per_step_s: float | None
    estimated_gain_frac: float | None
    row_gain_per_step_s: Mapping[str, float]
    gain_model: str
    gain_basis: str
    thresholds: tuple[Mapping[str, Any], ...]
    evidence: Mapping[str, Any]
    kernel_id: str | None
    command: str | None
    references: tuple[str, ...]
    caveats: tuple[str, ...]
    source: str
    action: str
    action_reason: str
    measured: MeasuredOutcome | None = None
    predicted_rank: int | None = None  # set when `rank` is the measured rank

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> "RecommendationEntry":
        values = {f.name: doc[f.name] for f in fields(cls) if f.name not in ("measured", "predicted_rank")}
        for key in ("row_ids", "thresholds", "references", "caveats"):
            values[key] = tuple(values[key])
        return cls(**values, measured=MeasuredOutcome.from_json(doc.get("measured")),
                   predicted_rank=doc.get("predicted_rank"))


ENTRY_KEYS = tuple(f.name for f in fields(RecommendationEntry) if f.name not in ("measured", "predicted_rank"))
REQUIRED = ("run", "step_s", "findings", "recommendations", "hotspots", "plan")


@dataclass(frozen=True)
class RecommendationsRecord:
    run: Mapping[str, Any]
    step_s: float | None
    findings: tuple[Mapping[str, Any], ...]
    recommendations: tuple[RecommendationEntry, ...]
    hotspots: tuple[Mapping[str, Any], ...]
    plan: Mapping[str, Any] | None
    rest: Mapping[str, Any] = field(default_factory=dict)  # totals, suppressed, compile check, also, ...

    def to_json(self) -> dict[str, Any]:
        entries = [asdict(e) for e in self.recommendations]
        return strict({"schema_version": SCHEMA_VERSION, **self.rest, "run": self.run, "step_s": self.step_s,
                       "findings": self.findings, "recommendations": entries, "hotspots": self.hotspots,
                       "plan": self.plan})

    @classmethod
    def from_json(cls, doc: Any, source: str | Path = FILE) -> "RecommendationsRecord":
        check_record(doc, source, SCHEMA_VERSION, REQUIRED, RERUN)
        entries = []
        for i, item in enumerate(doc["recommendations"]):
            missing = [k for k in ENTRY_KEYS if not isinstance(item, dict) or k not in item]
            if missing:
                check_record({"schema_version": SCHEMA_VERSION}, f"{source} (recommendation {i})",
                             SCHEMA_VERSION, missing, RERUN)
            entries.append(RecommendationEntry.from_json(item))
        rest = {k: v for k, v in doc.items() if k not in REQUIRED and k != "schema_version"}
        return cls(run=doc["run"], step_s=doc["step_s"], findings=tuple(doc["findings"]),
                   recommendations=tuple(entries), hotspots=tuple(doc["hotspots"]), plan=doc["plan"], rest=rest)

    @classmethod
    def read(cls, run_dir: Path) -> "RecommendationsRecord | None":
        """The run's record, or None when `advisor recommend` has not written one."""
        path = Path(run_dir) / FILE
        return cls.from_json(read_json(path, RERUN), path) if path.is_file() else None
