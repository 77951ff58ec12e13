"""What a rule is applied to: one op row, one pattern group, or the whole run.

A Subject carries the evidence its rules test and, for Amdahl bookkeeping, the device
time per step of every op row it touches.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from kernel_advisor.collect.attribute import flag_value, op_label, text_value
from kernel_advisor.recommend.explain import CompileReport
from kernel_advisor.recommend.evidence import RunContext, op_evidence, run_evidence
from kernel_advisor.recommend.pattern_groups import PatternGroup, detect_patterns, pattern_evidence


@dataclass(frozen=True)
class Subject:
    scope: str  # "op" | "pattern" | "run"
    key: str  # stable id within the run: "row:12", "pattern:naive-attention:3-4-5", "run"
    evidence: dict[str, Any] = field(hash=False, compare=False)
    row_time_per_step_s: dict[int, float] = field(hash=False, compare=False)
    row_calls_per_step: dict[int, float] = field(hash=False, compare=False)


@dataclass(frozen=True)
class Subjects:
    run: Subject
    ops: tuple[Subject, ...]
    patterns: tuple[Subject, ...]
    ops_by_row: dict[int, dict] = field(hash=False, compare=False)

    def of_scope(self, scope: str) -> tuple[Subject, ...]:
        return {"op": self.ops, "pattern": self.patterns, "run": (self.run,)}[scope]


def _op_subject(row: dict, ctx: RunContext, run_ev: dict) -> Subject:
    ev = {**run_ev, **op_evidence(row, ctx), **_autograd_evidence(row)}
    row_id = ev["row_id"]
    return Subject("op", f"row:{row_id}", ev, {row_id: ev["time_per_step_s"]}, {row_id: ev["calls_per_step"]})


def _autograd_evidence(row: dict) -> dict[str, Any]:
    """Which backward an op row belongs to, and its name for people ("aten::mm (backward of
    aten::linear)"); rows of runs written before these columns read as forward ops."""
    fwd, node = text_value(row.get("backward_of")), text_value(row.get("autograd_node"))
    internal = flag_value(row.get("autograd_internal"))
    return {"backward_of": fwd, "autograd_node": node, "autograd_internal": internal,
            "phase": "backward" if fwd or node else "forward",
            "label": op_label(str(row.get("name", "")), fwd, node, internal)}


def _pattern_subject(group: PatternGroup, ops_by_row: dict[int, dict], ctx: RunContext, run_ev: dict) -> Subject:
    ev = {**run_ev, **pattern_evidence(group, ops_by_row, ctx)}
    key = f"pattern:{group.pattern}:" + "-".join(map(str, group.row_ids))
    calls = {r: group.row_ids.count(r) * group.instances / ctx.steps for r in set(group.row_ids)}
    times = {r: t / ctx.steps for r, t in group.row_time_s.items()}
    return Subject("pattern", key, ev, times, calls)


def build_subjects(ops: pd.DataFrame, sequence: pd.DataFrame, ctx: RunContext,
                   compile_report: CompileReport | None = None) -> Subjects:
    rows = ops.to_dict("records")
    ops_by_row = {int(r["row_id"]): r for r in rows}
    run_ev = run_evidence(ctx, ops)
    if compile_report is not None:
        run_ev.update(graph_breaks=compile_report.graph_break_count,
                      graph_break_reasons=compile_report.summary())
    op_subjects = tuple(_op_subject(r, ctx, run_ev) for r in rows)
    groups = detect_patterns(sequence, ops, ctx)
    pattern_subjects = tuple(_pattern_subject(g, ops_by_row, ctx, run_ev) for g in groups)
    all_rows = {s.evidence["row_id"]: s.evidence["time_per_step_s"] for s in op_subjects}
    run = Subject("run", "run", run_ev, all_rows,
                  {s.evidence["row_id"]: s.evidence["calls_per_step"] for s in op_subjects})
    return Subjects(run, op_subjects, pattern_subjects, ops_by_row)
