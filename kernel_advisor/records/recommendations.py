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
from typing import Any, Mapping, Sequence

from kernel_advisor.records.base import check_record, read_json, strict

SCHEMA_VERSION = 3
FILE = "recommendations.json"
RERUN = "`advisor recommend`"


@dataclass(frozen=True)
class MeasuredOutcome:
    """What `--measure` found for one recommendation's action (recommend/measured.py writes it)."""

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


FRAME_COLUMNS = ("rank", "rule_id", "tier", "title", "where", "subjects", "estimated_gain_per_step_s",
                 "estimated_gain_frac", "within_noise", "actions", "measured_verdict", "measured_gain_frac")


class Recommendations(list):
    """The record's entries, one per rule and subject, as `run.recommend()` returns them (a list).

    Several entries share a rank when one rule fired on several subjects, as `advisor recommend`
    shows them on one line; `to_frame()` is that table: one row per finding, in rank order."""

    def __init__(self, entries: Sequence[RecommendationEntry] = (), findings: Sequence[Mapping] = ()):
        super().__init__(entries)
        self.findings = tuple(findings)  # recommendations.json "findings": gain per rule, union over rows

    def to_frame(self):
        import pandas as pd

        by_rule: dict[str, list[RecommendationEntry]] = {}
        for e in self:
            by_rule.setdefault(e.rule_id, []).append(e)
        found = {f.get("rule_id"): f for f in self.findings if isinstance(f, Mapping)}
        rows = [_finding_row(entries, found.get(rule, {})) for rule, entries in by_rule.items()]
        frame = pd.DataFrame(rows, columns=list(FRAME_COLUMNS))
        return frame.sort_values(["rank", "rule_id"], kind="stable").reset_index(drop=True)


def _finding_row(entries: list[RecommendationEntry], finding: Mapping) -> dict:
    """One line of `advisor recommend`'s table: the rule's first subject, "+N more", the union gain."""
    head = entries[0]
    more = f" (+{len(entries) - 1} more)" if len(entries) > 1 else ""
    measured = head.measured
    return {"rank": head.rank, "rule_id": head.rule_id, "tier": head.tier, "title": head.title,
            "where": f"{head.label or head.subject}{more}", "subjects": len(entries),
            "estimated_gain_per_step_s": finding.get("estimated_gain_per_step_s", head.estimated_gain_per_step_s),
            "estimated_gain_frac": finding.get("estimated_gain_frac", head.estimated_gain_frac),
            "within_noise": bool(finding.get("within_noise", False)),
            "actions": ", ".join(dict.fromkeys(e.action for e in entries)),
            "measured_verdict": measured.verdict if measured is not None else None,
            "measured_gain_frac": measured.gain_frac if measured is not None else None}


def load_recommendations(run_dir: Path) -> tuple[RecommendationEntry, ...] | None:
    """The run's recommendations, or None when `advisor recommend` has not written any."""
    record = RecommendationsRecord.read(run_dir)
    return None if record is None else record.recommendations


def subject_key_rows(subject_key: str) -> frozenset[int]:
    """The op rows a stored subject key names, for data written with keys only (advice.csv):
    "row:12" → {12}; "pattern:naive-attention:3-4-5" → {3, 4, 5}; "run" → {}. In memory a
    Subject holds its rows (recommend/subjects.py)."""
    kind, _, rest = subject_key.partition(":")
    if kind == "row":
        return frozenset({int(rest)})
    if kind == "pattern":
        return frozenset(int(r) for r in rest.rsplit(":", 1)[-1].split("-") if r.isdigit())
    return frozenset()
